/* inspect.c: `k3chat --inspect MODEL_DIR`: what a checkpoint holds and what loading it with the
 * current settings would need, or the first error found (API: k3_inspect in k3.h).
 *
 * DESIGN
 * Everything is validated first (config.json, every text shard header, every tensor the config
 * implies, the tokenizer and that its ids fit vocab_size) so the report is printed only for a checkpoint that
 * would load; an error leaves the one-line message in k3_errmsg(). Nothing but headers is read: the report
 * comes from the tensor table (shapes, dtypes, shard offsets), never from tensor data, so it is fast on
 * the 1.5 TB release.
 *
 * Memory: the plan of fit.h (fit_scan / fit_plan_at / fit_decide, the same code k3_model_open
 * runs before reading any weight) at the settings the engine would run with on this machine:
 * k3_params_default (defaults and K3_*), a k3 container's stored bits where K3_BITS /
 * K3_MLA_BITS / K3_HEAD_BITS are unset (rp_run_bits; marked "(container)"), and what the fit
 * chooses for the settings not given (marked "(fit)"); then the bytes of each matrix class at
 * 32 / 8 / 4 bits, the machine's available memory and the fit's one-line decision (or refusal
 * with the figures). Only the layers that run count (K3_LAYERS).
 */
#include "config.h"
#include "experts.h"
#include "fit.h"
#include "quant.h"
#include "repack.h"
#include "tensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* The engine's settings (k3_params_default: defaults, then the K3_* environment; a container's
 * bits as the engine takes them: rp_run_bits). */
typedef struct insp_settings {
    int    bits, mla_bits, head_bits;
    int    from;      /* RP_FROM_* mask: bits a k3 container brought (the variable unset) */
    double expert_gb; /* < 0: unset (the fit chooses); 0: the floor of one expert per MoE layer */
    long   maxt;
    int    maxt_set;
    int    set;        /* K3_SET_* mask (k3_params.set)                                      */
    int    n_layers;   /* K3_LAYERS (0: all)                                                 */
    int    map;        /* K3_MMAP=1                                                          */
    int    chunk;      /* K3_CHUNK                                                           */
    int    window;     /* K3_WINDOW (0: unset)                                               */
    int    all_logits; /* K3_LOGITS is set                                                 */
} insp_settings;

static k3_status read_settings(const char *dir, insp_settings *s) {
    k3_params p;
    rp_info   ci;
    k3_status st = k3_params_default(&p);
    if (st || (st = rp_info_load(dir, &ci)))
        return st;
    s->from      = rp_run_bits(&ci, &p);
    s->bits      = p.bits;
    s->mla_bits  = p.mla_bits;
    s->head_bits = p.head_bits;
    s->expert_gb = p.expert_gb >= 0 ? p.expert_gb : -1;
    s->maxt      = p.max_ctx;
    s->maxt_set  = !!(p.set & K3_SET_MAXT);
    s->set       = p.set | (s->from & RP_FROM_BITS ? K3_SET_BITS : 0) |
             (s->from & RP_FROM_MLA ? K3_SET_MLA_BITS : 0) | (s->from & RP_FROM_HEAD ? K3_SET_HEAD_BITS : 0);
    s->n_layers   = p.n_layers;
    s->chunk      = p.chunk;
    s->window     = p.window;
    s->all_logits = p.logits_path != NULL;
    s->map        = 0;
    return k3_setting_env_int(K3_SETTING_MMAP, &s->map);
}

#define HB(x) fit_hb((char[32]){0}, 32, (double)(x))

/* ---- experts: size, contiguity, order ------------------------------------------------------- */

typedef struct expert_pos {
    int      id, shard;
    uint64_t begin;
} expert_pos;

static int cmp_pos(const void *a, const void *b) {
    const expert_pos *x = a, *y = b;
    if (x->shard != y->shard)
        return x->shard - y->shard;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

typedef struct expert_stats {
    uint64_t bytes_per;        /* the tensors of one expert (six)             */
    uint64_t total;            /* all routed experts                          */
    long     n, n_split;       /* experts; experts not stored back to back     */
    int      layers_unordered; /* MoE layers with experts out of id order      */
} expert_stats;

static k3_status scan_experts(const k3_config *c, const st_dir *d, expert_stats *es) {
    memset(es, 0, sizeof *es);
    expert_pos *pos = k3_calloc((size_t)c->n_experts, sizeof *pos);
    if (!pos)
        return k3_err(K3_ERR_NOMEM, "out of memory");
    for (int l = c->first_dense; l < c->n_layers; l++) {
        for (int e = 0; e < c->n_experts; e++) {
            uint64_t lo = UINT64_MAX, hi = 0, sum = 0;
            int      shard = -1, split = 0;
            for (int k = TT_EXPERT_FIRST; k < TT_COUNT; k++) {
                char             name[192];
                const st_tensor *t = st_find(d, tt_name(name, sizeof name, k, l, e));
                K3_ASSERT(t); /* cfg_check_tensors ran first */
                if (shard >= 0 && t->shard != shard)
                    split = 1;
                shard = t->shard;
                if (t->offset < lo)
                    lo = t->offset;
                if (t->offset + t->nbytes > hi)
                    hi = t->offset + t->nbytes;
                sum += t->nbytes;
            }
            if (split || hi - lo != sum)
                es->n_split++;
            es->bytes_per = sum;
            es->total += sum;
            es->n++;
            pos[e] = (expert_pos){e, shard, lo};
        }
        qsort(pos, (size_t)c->n_experts, sizeof *pos, cmp_pos);
        for (int e = 1; e < c->n_experts; e++)
            if (pos[e].shard == pos[e - 1].shard && pos[e].id < pos[e - 1].id) {
                es->layers_unordered++;
                break;
            }
    }
    free(pos);
    return K3_OK;
}

/* ---- report ------------------------------------------------------------------------------------ */

static void print_plan(const k3_config *c, FILE *f) {
    int n_kda = 0, n_mla = 0;
    for (int l = 0; l < c->n_layers; l++)
        c->layer_kind[l] == K3_LAYER_KDA ? n_kda++ : n_mla++;
    fprintf(f, "layers       %d: %d KDA + %d MLA attention; %d dense MLP + %d MoE\n", c->n_layers, n_kda,
            n_mla, c->first_dense, c->n_layers - c->first_dense);
    fprintf(f, "plan         K = KDA, M = MLA, lower case = dense MLP; groups of attn_res_block_size %d\n",
            c->attn_res_block);
    for (int l = 0; l < c->n_layers; l += 48) {
        fprintf(f, "  %4d       ", l);
        for (int i = l; i < c->n_layers && i < l + 48; i++) {
            if (i > l && i % c->attn_res_block == 0)
                fputc(' ', f);
            int ch = c->layer_kind[i] == K3_LAYER_KDA ? 'K' : 'M';
            fputc(i < c->first_dense ? ch + ('a' - 'A') : ch, f);
        }
        fputc('\n', f);
    }
    fprintf(f, "MLA layers   ");
    for (int l = 0, first = 1; l < c->n_layers; l++)
        if (c->layer_kind[l] == K3_LAYER_MLA) {
            fprintf(f, "%s%d", first ? "" : ", ", l);
            first = 0;
        }
    fprintf(f, " (0-indexed)\n");
}

static void print_dtypes(const st_dir *d, FILE *f) {
    long     cnt[ST_DTYPE_COUNT] = {0};
    uint64_t by[ST_DTYPE_COUNT] = {0}, total = 0;
    for (int i = 0; i < st_n_tensors(d); i++) {
        const st_tensor *t = st_tensor_at(d, i);
        cnt[t->dtype]++;
        by[t->dtype] += t->nbytes;
        total += t->nbytes;
    }
    fprintf(f, "tensors      %d text tensors, %s (%llu bytes)%s\n", st_n_tensors(d), HB(total),
            (unsigned long long)total, st_has_prefix(d) ? "; names carry the language_model. prefix" : "");
    for (int t = 0; t < ST_DTYPE_COUNT; t++)
        if (cnt[t])
            fprintf(f, "  %-5s      %7ld tensors  %12s  (%llu bytes)\n", st_dtype_name((st_dtype)t), cnt[t],
                    HB(by[t]), (unsigned long long)by[t]);
}

static void print_shards(const st_dir *d, FILE *f) {
    int n_vis = 0;
    for (int s = 0; s < st_n_shards(d); s++)
        n_vis += !st_shard_opened(d, s);
    fprintf(f, "shards       %d (%d vision-only, never opened)\n", st_n_shards(d), n_vis);
    int *per = k3_calloc((size_t)st_n_shards(d), sizeof *per);
    for (int i = 0; per && i < st_n_tensors(d); i++)
        per[st_tensor_at(d, i)->shard]++;
    for (int s = 0; s < st_n_shards(d); s++) {
        if (st_shard_opened(d, s))
            fprintf(f, "  %-40s %12s  %6d tensors\n", st_shard_name(d, s), HB(st_shard_size(d, s)),
                    per ? per[s] : 0);
        else
            fprintf(f, "  %-40s %12s  vision only, not opened\n", st_shard_name(d, s), "-");
    }
    free(per);
}

/* Parameters: elements of float tensors, two per MXFP4 weight_packed byte (scales not counted),
 * a container's U8 matrices at their logical width (sidecars not counted). */
static double n_params(const st_dir *d) {
    double n = 0;
    for (int i = 0; i < st_n_tensors(d); i++) {
        const st_tensor *t = st_tensor_at(d, i);
        if (t->dtype != ST_U8)
            n += (double)st_numel(t);
        else if (strstr(t->name, "weight_packed"))
            n += 2.0 * (double)t->nbytes;
    }
    return n;
}

static void print_memory(const fit_table *ft, const fit_machine *mc, const fit_choice *fc,
                         const insp_settings *s, int mask, FILE *f) {
    const fit_plan *p = &fc->plan;
    char            eg[48];
    if (s->expert_gb < 0)
        snprintf(eg, sizeof eg, "unset");
    else
        snprintf(eg, sizeof eg, "%g", s->expert_gb);
#define FROM(bit, set, v, given)                                                                             \
    (s->from & (bit) ? " (container)" : !(mask & (set)) && (v) != (given) ? " (fit)" : "")
    fprintf(f,
            "memory       K3_BITS=%d%s K3_MLA_BITS=%d%s K3_HEAD_BITS=%d%s K3_EXPERT_GB=%s K3_MAXT=%ld%s%s "
            "(the plan %s)\n",
            fc->set.bits, FROM(RP_FROM_BITS, K3_SET_BITS, fc->set.bits, s->bits), fc->set.mla_bits,
            FROM(RP_FROM_MLA, K3_SET_MLA_BITS, fc->set.mla_bits, s->mla_bits), fc->set.head_bits,
            FROM(RP_FROM_HEAD, K3_SET_HEAD_BITS, fc->set.head_bits, s->head_bits), eg, s->maxt,
            s->maxt_set ? "" : " (default)", s->map ? " K3_MMAP=1" : "",
            fc->ok ? "the engine would run with on this machine" : "at these settings: they do not fit here");
#undef FROM
    fprintf(f, "  dense matrices (K3_BITS)     %12s\n", HB(p->b[FIT_DENSE]));
    fprintf(f, "  MLA matrices (K3_MLA_BITS)   %12s\n", HB(p->b[FIT_MLA]));
    fprintf(f, "  lm_head (K3_HEAD_BITS)       %12s\n", HB(p->b[FIT_HEAD]));
    fprintf(f, "  embeddings (as stored)       %12s\n", HB(p->b[FIT_EMBED]));
    fprintf(f, "  small tensors (f32)          %12s\n", HB(p->b[FIT_SMALL]));
    uint64_t floor_b = (uint64_t)ft->n_moe * ft->expert_one, e = p->b[FIT_EXPERT];
    fprintf(f, "  routed experts               %12s  (%s; all experts %s)\n", HB(e),
            s->expert_gb < 0 && e >= ft->expert_all ? "K3_EXPERT_GB unset: all resident"
            : s->expert_gb < 0                      ? "K3_EXPERT_GB unset: what is left after the rest"
            : e >= ft->expert_all                   ? "the budget holds all experts"
            : e == floor_b                          ? "cache floor: one expert per MoE layer"
                                                    : "cache budget",
            HB(ft->expert_all));
    fprintf(f, "  KDA state + conv tails       %12s  (double-buffered)\n", HB(p->b[FIT_KDA]));
    fprintf(f, "  MLA latent cache             %12s  (%ld positions)\n", HB(p->b[FIT_MLACACHE]), s->maxt);
    fprintf(f, "  chunk scratch                %12s  (K3_CHUNK=%d columns, logits rows and MLA scores)\n",
            HB(p->b[FIT_SCRATCH]), fc->set.chunk);
    if (fc->set.window)
        fprintf(f,
                "  prefill window               %12s  (%d tokens%s: hidden states, AttnRes snapshots, "
                "routing and expert "
                "outputs per token)\n",
                HB(p->b[FIT_WINDOW]), fc->set.window, fc->set.window < fc->win_want ? ", shrunk to fit" : "");
    else
        fprintf(f,
                "  prefill window               %12s  (none: %d tokens do not fit; prefill per K3_CHUNK)\n",
                HB(0), fc->win_want);
    if (p->mapped)
        fprintf(f, "  mapped (page cache)          %12s  (K3_MMAP=1: not counted below)\n", HB(p->mapped));
    fprintf(f, "  total                        %12s  (one session)\n", HB(p->total));
    fprintf(
        f,
        "  each further session         %12s  (--serve --parallel N: MLA cache, KDA state, chunk scratch)\n",
        HB(p->b[FIT_KDA] + p->b[FIT_MLACACHE] + p->b[FIT_SCRATCH]));
    fprintf(f, "by bits      bytes of each class at 32 / 8 / 4 bits (%d layers run)\n", ft->n_run);
    static const char *cls[3] = {"dense", "MLA", "lm_head"};
    for (int k = 0; k < 3; k++)
        fprintf(f, "  %-8s   32: %llu  8: %llu  4: %llu\n", cls[k], (unsigned long long)ft->mat[k][0],
                (unsigned long long)ft->mat[k][1], (unsigned long long)ft->mat[k][2]);
    fprintf(f,
            "  embeddings %llu, small %llu, experts %llu (one %llu), KDA state %llu, MLA cache per position "
            "%llu\n",
            (unsigned long long)ft->embed, (unsigned long long)ft->small, (unsigned long long)ft->expert_all,
            (unsigned long long)ft->expert_one, (unsigned long long)ft->kda_state,
            (unsigned long long)ft->mla_per_pos);
    fprintf(f, "machine      %s available (%s; MemAvailable %s, cgroup %s), %s usable\n", HB(mc->avail),
            mc->src, mc->meminfo > 0 ? HB(mc->meminfo) : "unknown",
            mc->cgroup > 0 ? HB(mc->cgroup) : "no limit", HB(mc->usable));
    fprintf(f, "fit          %s\n", fc->ok ? fc->msg + strlen("memory fit: ") : fc->msg);
}

static k3_status inspect(const char *dir, int measure, FILE *out);

k3_status k3_inspect(const char *dir, FILE *out) {
    return inspect(dir, 0, out);
}

k3_status k3_inspect_measure(const char *dir, FILE *out) {
    return inspect(dir, 1, out);
}

static k3_status inspect(const char *dir, int measure, FILE *out) {
    insp_settings s;
    k3_config    *c = k3_calloc(1, sizeof *c);
    st_dir       *d = NULL;
    k3_status     st;
    expert_stats  es;
    fit_table     ft;
    fit_machine   mc;
    fit_choice   *fc = k3_calloc(1, sizeof *fc);
    if (!c || !fc) {
        free(c);
        free(fc);
        return k3_err(K3_ERR_NOMEM, "out of memory");
    }
    k3_tok *tok = NULL; /* loaded to be checked: a chat would refuse it at its first turn */
    if ((st = cfg_load(dir, c)) || (st = read_settings(dir, &s)) || (st = st_open(dir, &d)) ||
        (st = cfg_check_tensors(c, d)) || (st = scan_experts(c, d, &es)) ||
        (st = k3_tok_load_model(dir, c->vocab, &tok)))
        goto fail;
    k3_tok_free(tok);
    if (s.n_layers > c->n_layers) {
        st = k3_err(K3_ERR_ARG, "K3_LAYERS=%d: the model has %d layers", s.n_layers, c->n_layers);
        goto fail;
    }
    if ((st = fit_scan(c, d, s.n_layers ? s.n_layers : c->n_layers, 0, &ft)) || (st = fit_machine_get(&mc)))
        goto fail;
    fit_set given = {.bits       = s.bits,
                     .mla_bits   = s.mla_bits,
                     .head_bits  = s.head_bits,
                     .expert_gb  = s.expert_gb,
                     .maxt       = s.maxt,
                     .map        = s.map,
                     .chunk      = s.chunk,
                     .sessions   = 1,
                     .window     = s.window,
                     .all_logits = s.all_logits};
    fit_decide(&ft, &mc, &given, s.set, fc);

    fprintf(out, "model        %s (%s)\n", dir, c->model_type);
    fprintf(out, "kernels      %s (K3_ISA=%s)\n", k3_kernels(),
            k3_setting_env_str(K3_SETTING_ISA) ? k3_setting_env_str(K3_SETTING_ISA)
                                               : "unset: the best level this CPU runs");
    print_plan(c, out);
    fprintf(out, "dimensions   hidden %d, vocab %d, dense MLP %d, rms_norm_eps %g, attn_res_block_size %d\n",
            c->hidden, c->vocab, c->inter, (double)c->rms_eps, c->attn_res_block);
    fprintf(out, "KDA          %d heads x %d, conv kernel %d, gate_lower_bound %g\n", c->kda_heads,
            c->kda_head_dim, c->conv_k, (double)c->gate_lower_bound);
    fprintf(out, "MLA          %d heads, q_lora %d, kv_lora %d, nope %d, rope %d, v %d\n", c->n_heads,
            c->q_lora, c->kv_lora, c->nope, c->rope, c->v_dim);
    fprintf(out,
            "MoE          %d experts, %d active, %d shared; latent %d, expert width %d; SiTU beta %g / %g\n",
            c->n_experts, c->n_active, c->n_shared, c->latent, c->moe_inter, (double)c->situ_beta,
            (double)c->situ_linear_beta);
    fprintf(out, "tokens       bos %d, eos %d, pad %d; generation defaults temperature %g, top_p %g\n",
            c->bos_id, c->eos_id, c->pad_id, (double)c->gen_temp, (double)c->gen_top_p);
    print_dtypes(d, out);
    double np = n_params(d);
    /* the largest unit that leaves at least 1 before the point: 2.813 T, 41.2 M */
    const char  *unit = np >= 1e12 ? "T" : np >= 1e9 ? "B" : np >= 1e6 ? "M" : "k";
    const double div  = np >= 1e12 ? 1e12 : np >= 1e9 ? 1e9 : np >= 1e6 ? 1e6 : 1e3;
    fprintf(out, "parameters   %.3f %s (%.0f; MXFP4 weights two a byte, scales not counted)\n", np / div,
            unit, np);
    fprintf(out, "experts      %ld routed (%d MoE layers x %d), %s each (six MXFP4 tensors), %s in all\n",
            es.n, c->n_layers - c->first_dense, c->n_experts, HB(es.bytes_per), HB(es.total));
    if (es.n_split)
        fprintf(out, "  layout     %ld of %ld experts NOT contiguous (six reads each instead of one)\n",
                es.n_split, es.n);
    else
        fprintf(out, "  layout     every expert's six tensors are contiguous (one read per expert)\n");
    fprintf(out, "  order      %s\n",
            es.layers_unordered ? "experts not in id order inside shards"
                                : "experts in id order inside shards");
    print_shards(d, out);
    print_memory(&ft, &mc, fc, &s, s.set, out);
    fit_speed sp;
    double    dec, pre;
    fit_speed_get_model(dir, &ft, measure, s.chunk, c->n_active, &sp);
    fit_speed_estimate(&ft, &fc->set, &fc->plan, &sp, c->n_active, s.chunk, &dec, &pre);
    fprintf(out,
            "speed        decode %.3g s/token, prefill %.3g s/token (estimate at the settings above, "
            "K3_CHUNK=%d)\n",
            dec, pre, s.chunk);
    char ttft[512];
    fit_ttft_str(ttft, sizeof ttft, &ft, &fc->set, &fc->plan, &sp, c->n_active, s.chunk);
    fprintf(
        out,
        "first token  %s (estimate: prefill window %d tokens, flat routing, reads overlapping the compute)\n",
        ttft, fc->set.window > s.chunk ? fc->set.window : s.chunk);
    char wide[128] = "", expre[96] = ""; /* the rates at the chunk's width, when not 1 or 32 columns */
    if (sp.ex_pre > 0)
        snprintf(expre, sizeof expre, ", at %d columns (a chunk's, flat routing) %.0f GB/s x columns",
                 sp.ex_pre_n, sp.ex_pre / 1e9);
    if (sp.wide_n > 1 && sp.wide_n != 32)
        snprintf(wide, sizeof wide, "; of %d (the chunk) %.0f, %.0f, %.0f, %.0f", sp.wide_n, sp.wide[0] / 1e9,
                 sp.wide[1] / 1e9, sp.wide[2] / 1e9, sp.wide[3] / 1e9);
    fprintf(out,
            "  measured   memory read %.1f GB/s; products of one column (decode) f32 %.1f, int8 %.1f, int4 "
            "%.1f, MXFP4 %.1f GB/s of weights; routed experts as decode runs them %.1f GB/s%s; "
            "of 32 columns (prefill) %.0f, %.0f, %.0f, %.0f GB/s x columns%s; KDA recurrence %.3g ms a token "
            "and layer; "
            "%.1f us a call; drive %s%s%s%s%s%s "
            "(%s %s)\n",
            sp.mem_bw / 1e9, sp.dec[0] / 1e9, sp.dec[1] / 1e9, sp.dec[2] / 1e9, sp.dec[3] / 1e9,
            sp.ex_dec / 1e9, expre, sp.pre[0] / 1e9, sp.pre[1] / 1e9, sp.pre[2] / 1e9, sp.pre[3] / 1e9, wide,
            sp.kda_rec * 1e3, sp.call * 1e6, sp.disk > 0 ? HB(sp.disk) : "unknown", sp.disk > 0 ? "/s" : "",
            sp.sparse ? " (sparse file: holes, not the drive); its data " : "",
            sp.sparse ? (sp.disk_data > 0 ? HB(sp.disk_data) : "none found") : "",
            sp.sparse && sp.disk_data > 0 ? "/s" : "", sp.sparse ? " (the drive)" : "",
            sp.cached ? "cached in" : "measured now; cached in", sp.cache);
    char      when[64] = "?";
    time_t    tw       = (time_t)sp.when;
    struct tm tm;
    if (sp.when && gmtime_r(&tw, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    char lo[32];
    snprintf(lo, sizeof lo, "%.2f-", sp.load_lo);
    fprintf(out,
            "  when       %s%s at load %s%.2f on %d CPUs (load now %.2f; figures from a load unlike now's "
            "are measured again; --inspect --measure measures them all)\n",
            sp.cached ? "" : "up to now, from ", when, sp.load_hi - sp.load_lo >= 0.005 ? lo : "", sp.load_hi,
            sp.cpus, sp.load_now);
fail:
    st_close(d);
    free(c);
    free(fc);
    return st;
}
