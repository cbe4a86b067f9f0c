/* bench-ui.c: UI latency of the full-screen chat: the time from a token leaving the engine
 * (pushed on the event queue) to it being on the screen (after doupdate), and the UI thread's
 * CPU time as a share of the decode time.
 *
 * k3chat runs in a pseudo-terminal (forkpty) on the scripted mock engine (K3_MOCK), which
 * streams tokens at a steady rate, far faster than a real model decodes (a stress case for the
 * UI); K3_UI_STATS makes k3chat write its figures at exit. References: one 30 Hz frame (33 ms)
 * for the latency, 1 % for the CPU share (the target), and the 20 ms frame interval for
 * the UI thread's CPU time per frame that showed new tokens. Two turns: a plain-text answer (ui_*)
 * and a Markdown-heavy one (ui_md_*: headings, lists, tables, code blocks, rendered as they stream).
 */
#include "bench.h"

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int bench_ui(void);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Read the child's output until `needle` appears or the time is up (keeps the pty drained). */
static int pump_until(int fd, const char *needle, double secs) {
    static char   win[8192];
    static size_t nwin;
    double        end = now_s() + secs;
    while (now_s() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        char    b[4096];
        ssize_t n = read(fd, b, sizeof b);
        if (n <= 0)
            return -1;
        if (nwin + (size_t)n >= sizeof win - 1) { /* keep the tail */
            memmove(win, win + nwin - 1024, 1024);
            nwin = 1024;
        }
        memcpy(win + nwin, b, (size_t)n);
        nwin += (size_t)n;
        if (needle && memmem(win, nwin, needle, strlen(needle))) {
            nwin = 0;
            return 0;
        }
    }
    return needle ? -1 : 0;
}

/* 3 bytes per token, one every 2 ms: about 1800 tokens of plain text (markdown = 0) or of
 * Markdown (headings, emphasis, inline code, links, math, nested and task lists, a table with
 * CJK cells and a fenced block in each of 24 sections) */
static void write_script(const char *path, int markdown) {
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "delay 2\nthink ");
    for (int i = 0; i < 100; i++)
        fprintf(f, "reasoning step %03d, ", i);
    fprintf(f, "\nresponse ");
    if (markdown) /* one "response" line per Markdown line (they join with newlines) */
        for (int i = 0; i < 24; i++)
            fprintf(f,
                    "## Section %d\nresponse\nresponse Some **bold** text with `code` and a "
                    "[link](https://example.com/%d) "
                    "and $x_%d^2$ here.\nresponse\nresponse - item one\nresponse   - nested *em*\nresponse - "
                    "[x] task\n"
                    "response\nresponse | a | b | 漢字 |\nresponse |---|---|---|\nresponse | 1 | 2 | 三 "
                    "|\nresponse\n"
                    "response ```c\nresponse int x%d = %d;\nresponse ```\nresponse\n%s",
                    i, i, i, i, i, i + 1 < 24 ? "response " : "");
    else
        for (int i = 0; i < 120; i++)
            fprintf(f, "answer words %03d and 日本語, ", i);
    fprintf(f, "\n");
    fclose(f);
}

/* k3chat (exe) on the mock engine's script in a 120x40 pseudo-terminal (*fd), its state under
 * dir; stats (or NULL): K3_UI_STATS. Returns its pid, -1 on failure. */
static pid_t spawn_chat(const char *exe, const char *dir, const char *script, const char *stats, int *fd) {
    struct winsize ws  = {.ws_row = 40, .ws_col = 120};
    pid_t          pid = forkpty(fd, NULL, NULL, &ws);
    if (pid == 0) {
        setenv("TERM", "xterm-256color", 1);
        setenv("LC_ALL", "C.UTF-8", 1);
        setenv("K3_MOCK", script, 1);
        if (stats)
            setenv("K3_UI_STATS", stats, 1);
        setenv("XDG_STATE_HOME", dir, 1);
        setenv("XDG_DATA_HOME", dir, 1);
        execl(exe, "k3chat", "/bench/mock", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* One scripted turn in k3chat; results named PREFIX_token_to_screen_ms, PREFIX_cpu_share and
 * PREFIX_frame_cpu_ms. */
/* The k3chat built beside this k3-bench, into exe[n]: 0, or -1 when /proc/self/exe cannot say. */
static int sibling_k3chat(char *exe, size_t n) {
    ssize_t k = readlink("/proc/self/exe", exe, n - 16);
    if (k <= 0)
        return -1;
    exe[k]      = 0;
    char *slash = strrchr(exe, '/');
    if (!slash)
        return -1;
    strcpy(slash + 1, "k3chat");
    return 0;
}

static int run_turn(const char *prefix, int markdown) {
    char lat_name[64], cpu_name[64], frame_name[64];
    snprintf(lat_name, sizeof lat_name, "%s_token_to_screen_ms", prefix);
    snprintf(cpu_name, sizeof cpu_name, "%s_cpu_share", prefix);
    snprintf(frame_name, sizeof frame_name, "%s_frame_cpu_ms", prefix);
    if (!bench_want(lat_name) && !bench_want(cpu_name) && !bench_want(frame_name))
        return 0;
    char exe[4096], dir[64] = "/tmp/k3bench-ui.XXXXXX", script[128], stats[128], hist[160];
    if (sibling_k3chat(exe, sizeof exe) || !mkdtemp(dir))
        return 1;
    snprintf(script, sizeof script, "%s/mock.txt", dir);
    snprintf(stats, sizeof stats, "%s/stats.txt", dir);
    write_script(script, markdown);

    int   fd;
    pid_t pid = spawn_chat(exe, dir, script, stats, &fd);
    if (pid < 0)
        return 1;
    int ok = pump_until(fd, "mock", 10) == 0;
    if (ok && write(fd, "bench\r", 6) != 6)
        ok = 0;
    /* the end of the turn: the folded reasoning line (the plain answer fits the screen), or
     * the last code line of the Markdown answer and a moment for the turn to close */
    ok = ok && pump_until(fd, markdown ? "x23 = 23;" : "thought for", 60) == 0;
    pump_until(fd, NULL, markdown ? 0.5 : 0.2);
    if (write(fd, "\004", 1) != 1) /* Ctrl-D at the empty prompt: quit */
        ok = 0;
    for (int i = 0; i < 100 && pid; i++) {
        pump_until(fd, NULL, 0.05);
        if (waitpid(pid, NULL, WNOHANG) == pid)
            pid = 0;
    }
    if (pid) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    close(fd);
    double lat_mean = -1, lat_max = -1, cpu = -1, decode = -1, frames = 0;
    double t_user = 0, t_sys = 0, t_wakes = 0, t_frames = 0; /* while the turn streamed */
    FILE  *f = fopen(stats, "r");
    if (f) {
        char   key[64];
        double v;
        const struct {
            const char *key;
            double     *v;
        } fields[] = {
            {"latency_mean_ms", &lat_mean}, {"latency_max_ms", &lat_max},    {"ui_cpu_s", &cpu},
            {"decode_wall_s", &decode},     {"frames_with_tokens", &frames}, {"turn_user_s", &t_user},
            {"turn_sys_s", &t_sys},         {"turn_wakeups", &t_wakes},      {"turn_frames", &t_frames}};
        while (fscanf(f, "%63s %lf", key, &v) == 2)
            for (size_t j = 0; j < sizeof fields / sizeof fields[0]; j++)
                if (!strcmp(key, fields[j].key))
                    *fields[j].v = v;
        fclose(f);
    }
    remove(stats);
    remove(script);
    snprintf(hist, sizeof hist, "%s/k3chat/history", dir);
    remove(hist);
    snprintf(hist, sizeof hist, "%s/k3chat", dir);
    rmdir(hist);
    rmdir(dir);
    if (!ok || lat_mean < 0 || decode <= 0) {
        fprintf(stderr, "bench-ui: k3chat did not complete the scripted turn\n");
        return 1;
    }
    printf("# %s: %.0f frames with new tokens, max latency %.2f ms, UI CPU %.3f s over %.3f s of decoding "
           "(mock engine, one token per 2 ms, %s answer)\n",
           prefix, frames, lat_max, cpu, decode, markdown ? "Markdown" : "plain-text");
    printf("# %s: while the turn streamed: UI user %.3f s + system %.3f s, %.0f wake-ups, %.0f frames\n",
           prefix, t_user, t_sys, t_wakes, t_frames);
    if (bench_want(lat_name))
        bench_report(lat_name, lat_mean, "ms", 33.3, "ms");
    if (bench_want(cpu_name))
        bench_report(cpu_name, 100.0 * cpu / decode, "%", 1.0, "%");
    /* the UI's cost per streaming frame against the frame interval (20 ms): the share at any
     * decode speed is about frames/s x this */
    if (bench_want(frame_name) && frames > 0)
        bench_report(frame_name, 1e3 * cpu / frames, "ms", 20.0, "ms");
    return 0;
}

/* CPU seconds (user + system) that process pid has used */
static double proc_cpu_s(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE  *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n]           = 0;
    const char   *p  = strrchr(buf, ')'); /* fields 14 and 15 after the command's name */
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The CPU seconds k3chat (at exe) spends taking a bracketed paste of about `bytes` bytes of
 * text (lines of ASCII, 2-, 3- and 4-byte characters) into its input line: from the paste's
 * first byte until a key typed after it is on the screen. -1 on failure. */
static double paste_cpu(const char *exe, size_t bytes) {
    char dir[64] = "/tmp/k3bench-paste.XXXXXX", script[128];
    if (!mkdtemp(dir))
        return -1;
    snprintf(script, sizeof script, "%s/mock.txt", dir);
    FILE *f = fopen(script, "w");
    if (!f)
        return -1;
    fputs("delay 0\nresponse ok\n", f);
    fclose(f);
    size_t cap = bytes + 64, n = 0;
    char  *buf = malloc(cap);
    if (!buf)
        return -1;
    n += (size_t)snprintf(buf, cap, "\033[200~");
    for (int i = 0; n + 40 < cap - 16; i++)
        n += (size_t)snprintf(buf + n, cap - n, "paste line %07d \xc3\xa9\xe6\xbc\xa2\xf0\x9f\x8e\x89\n", i);
    n += (size_t)snprintf(buf + n, cap - n, "\033[201~Q7Q");

    int   fd;
    pid_t pid = spawn_chat(exe, dir, script, NULL, &fd);
    if (pid < 0) {
        free(buf);
        return -1;
    }
    double cpu = -1;
    if (pump_until(fd, "mock", 10) == 0) {
        pump_until(fd, NULL, 0.3); /* idle: the start's drawing is done */
        double c0 = proc_cpu_s(pid);
        for (size_t off = 0; off < n;) { /* write while draining the screen output */
            struct pollfd p = {fd, POLLIN | POLLOUT, 0};
            if (poll(&p, 1, 100) <= 0)
                continue;
            char sink[4096];
            if (p.revents & POLLIN && read(fd, sink, sizeof sink) <= 0)
                break;
            if (p.revents & POLLOUT) {
                ssize_t w = write(fd, buf + off, n - off < 4096 ? n - off : 4096);
                off += w > 0 ? (size_t)w : 0;
            }
        }
        if (pump_until(fd, "Q7Q", 120) == 0)
            cpu = proc_cpu_s(pid) - c0;
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(fd);
    free(buf);
    remove(script);
    rmdir(dir);
    return cpu;
}

/* ui_paste_100k_cpu_s, ui_paste_1m_cpu_s: the paste's CPU time. Reference: the same paste into
 * the k3chat named by K3_BENCH_REF_K3CHAT (an older build), measured in alternating rounds;
 * without it, the other size's figure scaled by the sizes (linear cost). Medians of 3 rounds. */
static int run_paste(void) {
    static const struct {
        const char *name;
        size_t      bytes;
    } sz[] = {{"ui_paste_100k_cpu_s", 100000}, {"ui_paste_1m_cpu_s", 1000000}};
    char exe[4096];
    if (sibling_k3chat(exe, sizeof exe) || (!bench_want(sz[0].name) && !bench_want(sz[1].name)))
        return 0;
    const char *ref = k3_setting_env_str(K3_SETTING_BENCH_REF_K3CHAT);
    double      med[2][2]; /* [size][new, reference] */
    for (int s = 0; s < 2; s++) {
        double r[2][3];
        for (int i = 0; i < 3; i++) /* rounds alternate between the two */
            for (int w = 0; w < 1 + (ref != NULL); w++)
                if ((r[w][i] = paste_cpu(w ? ref : exe, sz[s].bytes)) < 0) {
                    fprintf(stderr, "bench-ui: k3chat did not take the paste\n");
                    return 1;
                }
        for (int w = 0; w < 1 + (ref != NULL); w++) { /* the median of 3 */
            double *x = r[w], lo = x[0] < x[1] ? x[0] : x[1], hi = x[0] < x[1] ? x[1] : x[0];
            med[s][w] = x[2] < lo ? lo : x[2] > hi ? hi : x[2];
        }
    }
    printf("# ui_paste: CPU seconds of k3chat taking a bracketed paste into its input line (reference: %s)\n",
           ref ? ref : "the other size's figure times the size ratio");
    for (int s = 0; s < 2; s++)
        if (bench_want(sz[s].name))
            bench_report(sz[s].name, med[s][0], "s",
                         ref ? med[s][1] : med[!s][0] * (double)sz[s].bytes / (double)sz[!s].bytes, "s");
    return 0;
}

int bench_ui(void) {
    /* ui_*: a plain-text answer; ui_md_*: a Markdown-heavy one (rendered as it streams);
     * ui_paste_*: a large bracketed paste */
    return run_turn("ui", 0) | run_turn("ui_md", 1) | run_paste();
}
