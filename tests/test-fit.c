/* test-fit.c: the memory fit's decision for a mapped k3-repack container (K3_MMAP=1) and the
 * speed estimate's drive term for what the page cache cannot keep (src/model/fit.c, speed.c).
 * Mapped weights are read in full every token, so the plan gives them memory before an unset
 * expert cache; what the budget cannot hold of them is re-read from the drive each token
 * (fit_plan.reread) and costed at the drive's rate. The prefill window takes K3_MAXT tokens or
 * what half of the room beside the plan holds, and the time-to-first-token estimate reads each
 * unique expert about once per window (per chunk: ~7x that at 1k tokens). Figures are synthetic, in the
 * release's proportions (a table as fit_scan would fill it), so every expectation is computed here.
 */
#include "fit.h"
#include "quant.h"
#include "test.h"

#include <math.h>

#define GB 1e9

static fit_table table(void) {
    fit_table t         = {0};
    t.mat[FIT_DENSE][2] = (uint64_t)(27 * GB), t.mat[FIT_DENSE][1] = (uint64_t)(50 * GB);
    t.mat[FIT_MLA][2] = (uint64_t)(2 * GB), t.mat[FIT_MLA][1] = (uint64_t)(4 * GB);
    t.mat[FIT_HEAD][2] = (uint64_t)(0.6 * GB), t.mat[FIT_HEAD][1] = (uint64_t)(1.2 * GB);
    t.embed = (uint64_t)(2.3 * GB), t.small = (uint64_t)(3.3 * GB);
    t.n_moe = 92, t.expert_one = 17550000, t.expert_all = (uint64_t)92 * 896 * 17550000;
    t.kda_state = 929000000, t.mla_per_pos = 55296, t.blocks = 1000000;
    t.cb_base = 1000000, t.cb_col = 2700000, t.cb_pos = 4096, t.n_mats = 900;
    t.n_run = 93, t.n_kda = 69, t.n_mla = 24;
    return t;
}

static fit_machine machine(double gb) {
    fit_machine m = {.avail = gb * GB, .src = "K3_MEM_GB"};
    m.usable      = m.avail - 0.5 * GB - 0.05 * m.avail;
    return m;
}

/* A fake cgroup tree for K3_TEST_CGROUP (k3_machine_memory): files "PATH=TEXT" under t_tmp()/cg-NAME
 * (self: /proc/self/cgroup, fs/...: /sys/fs/cgroup/...), then the figures read through it. */
static void cgroup_case(const char *name, const char *const *files, double want_limit, double want_room) {
    char dir[1024], path[2048];
    snprintf(dir, sizeof dir, "%s/cg-%s", t_tmp(), name);
    t_sh("rm -rf '%s'", dir);
    for (const char *const *f = files; *f; f++) {
        const char *eq = strchr(*f, '=');
        snprintf(path, sizeof path, "%s/%.*s", dir, (int)(eq - *f), *f);
        t_sh("mkdir -p \"$(dirname '%s')\" && printf '%%b\\n' '%s' > '%s'", path, eq + 1, path);
    }
    setenv("K3_TEST_CGROUP", dir, 1);
    double phys, limit, room;
    k3_machine_memory(&phys, &limit, &room);
    fit_machine mc;
    k3_status   st = fit_machine_get(&mc);
    unsetenv("K3_TEST_CGROUP");
    T_CHECK(
        phys > 0 && limit == want_limit && room == want_room && !st && mc.cgroup == room &&
            (room == 0 || mc.meminfo <= room || (mc.avail == room && !strcmp(mc.src, "cgroup memory limit"))),
        "cgroup %s: limit %.0f (want %.0f), room %.0f (want %.0f), the fit's available %.0f (%s)", name,
        limit, want_limit, room, want_room, mc.avail, mc.src);
}

int main(void) {
    /* The process's cgroup memory limit, read once for the fit and the server's grammar budget:
     * cgroup v2 from the process's own up (the least room, the least limit), v1's memory
     * controller (which the fit did not read), v1 "no limit" (about 2^63) and v2 "max" */
    static const char *const v2[]     = {"self=0::/a/b",
                                         "fs/a/b/memory.max=500000000",
                                         "fs/a/b/memory.current=490000000",
                                         "fs/a/memory.max=300000000",
                                         "fs/a/memory.current=0",
                                         NULL};
    static const char *const v1[]     = {"self=4:cpu,memory:/docker/x\\n0::/",
                                         "fs/memory/memory.limit_in_bytes=300000000",
                                         "fs/memory/memory.usage_in_bytes=100000000", NULL};
    static const char *const v1none[] = {"self=4:memory:/",
                                         "fs/memory/memory.limit_in_bytes=9223372036854771712", NULL};
    static const char *const v2max[]  = {"self=0::/", "fs/memory.max=max", NULL};
    static const char *const absent[] = {NULL};
    cgroup_case("v2", v2, 300000000, 10000000);
    cgroup_case("v1", v1, 300000000, 200000000);
    cgroup_case("v1-unlimited", v1none, 0, 0);
    cgroup_case("v2-max", v2max, 0, 0);
    cgroup_case("absent", absent, 0, 0);

    fit_table t     = table();
    fit_set   given = {.bits = 4, .mla_bits = 4, .head_bits = 4, .expert_gb = -1, .maxt = 8192, .chunk = 32};
    int       mask  = K3_SET_BITS | K3_SET_MLA_BITS | K3_SET_HEAD_BITS;
    double    floor_b = 92.0 * 17550000;

    /* not mapped: the cache takes what is left, nothing is re-read */
    fit_machine mc = machine(100);
    fit_choice  c;
    fit_decide(&t, &mc, &given, mask, &c);
    fit_plan p0;
    fit_set  at_floor = given;
    fit_plan_at(&t, &at_floor, &p0);
    T_CHECK(c.ok && c.plan.reread == 0 && c.plan.mapped == 0, "unmapped: fits, nothing mapped or re-read");
    T_NEAR((double)c.plan.b[FIT_EXPERT], mc.usable - (double)p0.total + floor_b, 1e6,
           "unmapped: the expert cache is what is left of usable (%.3f GB)", c.plan.b[FIT_EXPERT] / GB);

    /* mapped, room for all of it: the mapped weights are left room first, none re-read */
    given.map = 1;
    fit_plan_at(&t, &given, &p0); /* cache at its floor */
    double mapped = (double)p0.mapped;
    T_NEAR(mapped, (27 + 2 + 0.6 + 2.3) * GB, 1e3, "mapped: matrices and embeddings (%.2f GB)", mapped / GB);
    mc = machine(100);
    fit_decide(&t, &mc, &given, mask, &c);
    T_CHECK(c.ok && c.plan.reread == 0, "mapped, 100 GB: fits, nothing re-read (reread %.3f GB)",
            c.plan.reread / GB);
    T_NEAR((double)c.plan.b[FIT_EXPERT], mc.usable - (double)p0.total + floor_b - mapped, 1e6,
           "mapped, 100 GB: the cache takes what is left after the mapped weights (%.3f GB)",
           c.plan.b[FIT_EXPERT] / GB);
    T_CHECK((double)c.plan.total + mapped <= mc.usable + 1e6,
            "mapped, 100 GB: private plan + mapped weights within usable");
    T_CHECK(strstr(c.msg, "what is left after the mapped weights") &&
                strstr(c.msg, "read again from the drive"),
            "mapped: the fit line says so (%.160s)", c.msg);

    /* mapped, budget below the mapped weights: the cache stays at its floor, the rest re-read */
    mc = machine(10);
    fit_decide(&t, &mc, &given, mask, &c);
    T_CHECK(c.ok, "mapped, 10 GB: fits with the cache at its floor");
    T_NEAR((double)c.plan.b[FIT_EXPERT], floor_b, 1, "mapped, 10 GB: one expert per MoE layer (%.3f GB)",
           c.plan.b[FIT_EXPERT] / GB);
    double want = mapped - (mc.usable - (double)c.plan.total);
    T_NEAR((double)c.plan.reread, want, 1e3, "mapped, 10 GB: reread = mapped - (usable - private) = %.3f GB",
           want / GB);

    /* the estimate: the re-read bytes at the drive's rate, per decode token and per prefill chunk */
    fit_speed sp = {.mem_bw = 40 * GB, .call = 1e-5, .disk = 8 * GB, .disk_data = 0.42 * GB}; /* holes */
    for (int f = 0; f < 4; f++)
        sp.dec[f] = 20 * GB, sp.pre[f] = 200 * GB;
    double   dec1, pre1, dec0, pre0;
    fit_plan none = c.plan;
    none.reread   = 0;
    fit_speed_estimate(&t, &c.set, &c.plan, &sp, 16, 32, &dec1, &pre1);
    fit_speed_estimate(&t, &c.set, &none, &sp, 16, 32, &dec0, &pre0);
    T_NEAR(dec1 - dec0, want / sp.disk_data, 1e-6 * dec1,
           "decode estimate: + reread at the drive's data rate, not the holes' = %.1f s (%.1f s in all)",
           want / sp.disk_data, dec1);
    T_NEAR(pre1 - pre0, want / sp.disk_data / 32, 1e-6 * pre1,
           "prefill estimate: + reread at the data rate per chunk of 32");

    /* the measured expert rate (ex_dec), when there is one, replaces the 256 MB MXFP4 matrix's rate
     * plus three calls for each of a decode token's n_moe x k experts; prefill is unchanged */
    fit_speed sx = sp;
    sx.ex_dec    = 5 * GB;
    double dx, px;
    fit_speed_estimate(&t, &c.set, &c.plan, &sx, 16, 32, &dx, &px);
    const double one = (double)t.expert_one, act = (double)t.n_moe * 16;
    const double dwant = act * (one / sx.ex_dec - (one / sp.dec[Q_MXFP4] + 3 * sp.call));
    T_NEAR(dx - dec1, dwant, 1e-6 * dx, "decode estimate with the expert rate: %+.3f s (%.3f s in all)",
           dwant, dx);
    T_CHECK(px == pre1, "prefill estimate: the expert rate leaves it as it was (%.4g s)", px);

    /* issue 43: the rates of sp as seconds per byte, one column and each further one (the line
     * through the 1- and 32-column points) */
    const double t1 = 1 / sp.dec[0], pc = (32 / sp.pre[0] - t1) / 31;
    const int    hb   = c.set.head_bits == 32 ? 0 : c.set.head_bits == 8 ? 1 : 2;
    const double head = (double)t.mat[FIT_HEAD][hb];

    /* the head multiplies a chunk's last row only (forward.c: model_head), all C with K3_LOGITS */
    fit_set lg = c.set;
    double  dl, pl;
    lg.all_logits = 1;
    fit_speed_estimate(&t, &lg, &c.plan, &sp, 16, 32, &dl, &pl);
    T_NEAR(pl - pre1, head * pc * 31 / 32, 1e-9 * pl,
           "prefill estimate: the head at one column a chunk, at 32 with K3_LOGITS (%+.4g s a token)",
           pl - pre1);
    T_CHECK(dl == dec1, "decode estimate: K3_LOGITS changes nothing (%.4g s)", dl);

    /* a rate measured at the chunk's width below 32 (wide_n 16) is a point of the curve: the matrices
     * multiplied by the chunk's 16 columns cost it exactly, an expert's few columns the piece from
     * one column to it */
    fit_speed sw = sp;
    sw.wide_n    = 16;
    for (int f = 0; f < 4; f++)
        sw.wide[f] = 100 * GB;
    double    d16, p16, dw16, pw16;
    const int mb      = c.set.bits == 32  ? 0
                        : c.set.bits == 8 ? 1
                                          : 2,
              lb      = c.set.mla_bits == 32  ? 0
                        : c.set.mla_bits == 8 ? 1
                                              : 2;
    const double mats = (double)t.mat[FIT_DENSE][mb] + (double)t.mat[FIT_MLA][lb] + (double)t.small;
    const double E = 896, distinct = E * (1 - pow(1 - 16 / E, 16)), cols = 16 * 16 / distinct;
    const double s_line = t1 + pc * (cols - 1), s_wide = t1 + (16 / sw.wide[0] - t1) / 15 * (cols - 1);
    fit_speed_estimate(&t, &c.set, &c.plan, &sp, 16, 16, &d16, &p16);
    fit_speed_estimate(&t, &c.set, &c.plan, &sw, 16, 16, &dw16, &pw16);
    const double want16 =
        (mats * (16 / sw.wide[0] - (t1 + 15 * pc)) + t.n_moe * distinct * one * (s_wide - s_line)) / 16;
    T_NEAR(pw16 - p16, want16, 1e-9 * pw16,
           "prefill estimate, chunk 16 with its rate measured: %+.4g s a token", want16);
    T_CHECK(dw16 == d16, "decode estimate: the chunk's rate changes nothing (%.4g s)", dw16);

    /* the experts' own probe at ex_pre_n columns: an expert with that many columns costs it exactly
     * (not the 7168-wide matrix's curve plus three calls); past it the same ratio to the curve */
    fit_speed se = sp;
    se.ex_pre = 50 * GB, se.ex_pre_n = 4;
    fit_route rt = {
        .dec_active = 16, .dec_miss = 0, .chunk_distinct = 64, .chunk_miss = 0}; /* 4 columns each */
    double dr, pr, dre, pre_e;
    fit_speed_estimate_route(&t, &c.set, &c.plan, &sp, 16, 16, &rt, &dr, &pr);
    fit_speed_estimate_route(&t, &c.set, &c.plan, &se, 16, 16, &rt, &dre, &pre_e);
    const double g4 = one * (t1 + 3 * pc) + 3 * sp.call, e4 = one * 4 / se.ex_pre;
    T_NEAR(pre_e - pr, t.n_moe * 64 * (e4 - g4) / 16, 1e-9 * pre_e,
           "prefill estimate, experts at the probe's 4 columns: %.4g s each, not %.4g", e4, g4);
    rt.chunk_distinct = 32; /* 8 columns each */
    fit_speed_estimate_route(&t, &c.set, &c.plan, &sp, 16, 16, &rt, &dr, &pr);
    fit_speed_estimate_route(&t, &c.set, &c.plan, &se, 16, 16, &rt, &dre, &pre_e);
    const double g8 = one * (t1 + 7 * pc) + 3 * sp.call;
    T_NEAR(pre_e - pr, t.n_moe * 32 * g8 * (e4 / g4 - 1) / 16, 1e-9 * pre_e,
           "prefill estimate, experts at 8 columns: the curve times the probe's ratio %.3f", e4 / g4);

    /* the prefill window: K3_MAXT tokens when half of what is left beside the plan holds them,
     * else what it does (said in the fit line), none below the chunk; a given cache leaves the
     * window all of what is left */
    t.win_base = 1000000, t.win_col = 600000; /* 0.6 MB per token: about the release's */
    fit_set wg = given;
    wg.map     = 0;
    mc         = machine(100);
    fit_decide(&t, &mc, &wg, mask, &c);
    T_CHECK(c.ok && c.set.window == 8192 && c.plan.b[FIT_WINDOW] == t.win_base + t.win_col * 8192,
            "window, 100 GB: K3_MAXT=8192 tokens, %.2f GB in the plan (got %d)", c.plan.b[FIT_WINDOW] / GB,
            c.set.window);
    T_CHECK(strstr(c.msg, "prefill window 8192 tokens") && !strstr(c.msg, "shrunk"),
            "window, 100 GB: the fit line names it (%.80s)",
            strstr(c.msg, "prefill") ? strstr(c.msg, "prefill") : c.msg);
    wg.window = 0;
    fit_plan pw;
    fit_set  nowin  = c.set;
    nowin.window    = 0;
    nowin.expert_gb = -1;
    fit_plan_at(&t, &nowin, &pw);
    /* tight: half of what is left holds fewer tokens than K3_MAXT */
    double left_gb = 1.5; /* what a machine leaves beside the plan at the cache's floor */
    mc             = machine(100);
    mc.usable      = (double)pw.total + left_gb * GB;
    fit_decide(&t, &mc, &wg, mask, &c);
    int wexp = (int)((left_gb * GB / 2 - (double)t.win_base) / (double)t.win_col);
    T_CHECK(c.ok && c.set.window == wexp && strstr(c.msg, "shrunk to fit the memory"),
            "window, %.1f GB left: shrunk to half of it, %d tokens, and says so (got %d)", left_gb, wexp,
            c.set.window);
    mc.usable = (double)pw.total + 0.03 * GB; /* 15 MB for the window: under K3_CHUNK=32 tokens */
    fit_decide(&t, &mc, &wg, mask, &c);
    T_CHECK(c.ok && c.set.window == 0 && c.plan.b[FIT_WINDOW] == 0 && strstr(c.msg, "no prefill window"),
            "window, 30 MB left: none (per chunk), and says so (got %d)", c.set.window);
    wg.window = 1000; /* K3_WINDOW */
    mc        = machine(100);
    fit_decide(&t, &mc, &wg, mask, &c);
    T_CHECK(c.ok && c.set.window == 1000, "K3_WINDOW=1000: a window of 1000 tokens (got %d)", c.set.window);

    /* time to first token: a 1,024-token prompt under flat routing with the cache at its floor
     * reads each unique expert about once in one window; per chunk of 128 about 7x that */
    fit_set one_l = c.set;
    one_l.window  = 8192;
    fit_plan_at(&t, &one_l, &pw);
    pw.b[FIT_EXPERT] = (uint64_t)floor_b;
    fit_ttft_est w, k;
    fit_ttft(&t, &one_l, &pw, &sp, 16, 128, 1024, &w);
    one_l.window = 0;
    fit_ttft(&t, &one_l, &pw, &sp, 16, 128, 1024, &k);
    T_CHECK(w.window == 8192 && k.window == 128, "first token: windows %d and %d", w.window, k.window);
    T_CHECK(w.bytes <= 1.1 * w.floor && w.bytes >= 0.95 * w.floor,
            "first token, 1k prompt, window: %.2f TB read against the unique-expert floor %.2f TB",
            w.bytes / 1e12, w.floor / 1e12);
    T_CHECK(k.bytes > 6 * w.floor && k.bytes < 8 * w.floor,
            "first token, 1k prompt, per chunk of 128: %.2f TB, %.1fx the floor (the issue's ~7x)",
            k.bytes / 1e12, k.bytes / w.floor);
    T_CHECK(w.seconds < k.seconds && w.seconds >= w.bytes / sp.disk,
            "first token: the window's %.0f s below the per-chunk %.0f s and no faster than its reads",
            w.seconds, k.seconds);
    return t_done();
}
