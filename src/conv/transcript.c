/* transcript.c: conversation files: JSON Lines transcripts (save, load, autosave) and
 * the Markdown export. The format is documented in man/k3chat.5.
 *
 * DESIGN
 * Line 1 is a header object (format, version, k3chat version, model, settings); then one
 * object per message in the OpenAI chat shape (role, content, reasoning_content) with
 * k3chat's extras (interrupted, token_ids, stats). All JSON goes through jansson.
 * A file without the header (messages from the first line on) is read with default
 * settings, so chat logs from other tools load too.
 *
 * Durability: a file on disk is always a valid transcript.
 *   - Whole files (/save, export, the first autosave, autosave rewrites after an edit) go
 *     to a temporary file in the same directory, fsync, rename over the target, fsync the
 *     directory: a crash leaves the old file or the new one, never a mix.
 *   - Autosave appends the lines of a turn (the user message as the front end starts the
 *     answer, the answer at its end) with ONE write(2) each to an O_APPEND file and
 *     then fsync. A failed write we see (disk full) is cut back with ftruncate. One we do
 *     not see (SIGKILL stops a large write between pages; power loss) leaves a prefix of
 *     the turn's lines, so the reader ignores a final line that has no newline and is not
 *     valid JSON, and says so: the file still holds every turn completed before.
 *   - The autosave writes only to the file it made, as it left it (device, inode, size:
 *     file_is_ours): one another program replaced (another k3chat's /save onto it), removed
 *     or wrote to is left alone, and the conversation goes whole to a new file. Each process
 *     has files of its own (a load goes on in a new one), so none interleaves with another.
 *   - Failures (full disk, unwritable directory) come back as K3_ERR_IO naming the path
 *     and errno; nothing in memory changes, and the next autosave retries.
 * Loading parses into a scratch conversation and swaps it in only when the whole file
 * is good, so a malformed file (reported as "FILE:LINE: what") leaves memory untouched.
 */
#include "conv-impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TRANSCRIPT_FORMAT "k3chat-transcript"
#define TRANSCRIPT_VERSION 1
#define TRANSCRIPT_MAX (1u << 30) /* bytes: refuse larger files */
#define JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(9))

/* ==== growable byte buffer ================================================= */

typedef k3_buf sbuf; /* the engine's growable buffer (k3.h) */

/* Appends after a failure do nothing, so a file is written whole or reported as out of memory. */
static void sb_add(sbuf *b, const char *s, size_t n) {
    if (!b->oom)
        k3_buf_add(b, s, n);
}

static void sb_str(sbuf *b, const char *s) {
    sb_add(b, s, strlen(s));
}

/* Appends j as one compact line (j is consumed). */
static void sb_json_line(sbuf *b, json_t *j) {
    char *s = j ? json_dumps(j, JSON_FLAGS) : NULL;
    json_decref(j);
    if (!s) {
        b->oom = 1;
        return;
    }
    sb_str(b, s);
    sb_add(b, "\n", 1);
    free(s);
}

/* ==== JSON building ========================================================== */

/* Float settings are stored as floats; print them with their shortest decimal. */
static json_t *jfloat(float f) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%.7g", (double)f);
    return json_real(strtod(tmp, NULL));
}

static json_t *jseed(uint64_t seed) {
    if (seed <= (uint64_t)INT64_MAX)
        return json_integer((json_int_t)seed);
    char tmp[24];
    snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)seed);
    return json_string(tmp);
}

/* Writes back what a load kept of a line (k3_msg.extra, unwritten_members): each member o lacks
 * is added; one that is an object in both is merged member by member (unknown members of
 * "settings" or "stats"), and one that is an array of as many elements in both element by
 * element (a tool call's or a content part's own members); what this version writes wins.
 * Returns nonzero on failure. */
static int merge_value(json_t *have, json_t *v);

static int merge_unknown(json_t *o, json_t *x) {
    const char *k;
    json_t     *v;
    int         bad = 0;
    json_object_foreach(x, k, v) {
        json_t *have = json_object_get(o, k);
        bad |= have ? merge_value(have, v) : json_object_set(o, k, v);
    }
    return bad;
}

static int merge_value(json_t *have, json_t *v) {
    int bad = 0;
    if (json_is_object(have) && json_is_object(v))
        bad = merge_unknown(have, v);
    else if (json_is_array(have) && json_is_array(v) && json_array_size(have) == json_array_size(v))
        for (size_t i = 0; i < json_array_size(v); i++)
            bad |= merge_value(json_array_get(have, i), json_array_get(v, i));
    return bad; /* else the message changed since (an edited system prompt): it is as written */
}

static int add_unknown(json_t *o, const char *extra) {
    if (!o || !extra)
        return 0;
    json_t *x   = json_loads(extra, 0, NULL);
    int     bad = !x || merge_unknown(o, x);
    json_decref(x);
    return bad;
}

static json_t *header_json(const k3_conv *c) {
    char      when[32] = "";
    time_t    now      = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    const k3_conv_settings *s = &c->set;

    json_t *set = json_pack(
        "{s:o, s:o, s:o, s:i, s:o, s:b, s:s, s:i, s:i, s:i, s:i}", "temperature", jfloat(s->sampling.temp),
        "top_p", jfloat(s->sampling.top_p), "min_p", jfloat(s->sampling.min_p), "top_k", s->sampling.top_k,
        "seed", jseed(s->sampling.seed), "think", s->think, "effort", s->effort, "max_tokens", s->max_tokens,
        "bits", c->bits, "mla_bits", c->mla_bits, "head_bits", c->head_bits);
    json_t *model = json_pack("{s:s?, s:s?}", "dir", c->model_dir, "config_fnv64",
                              c->config_fnv64[0] ? c->config_fnv64 : NULL);
    if (set && s->tool_choice[0] && strcmp(s->tool_choice, "auto"))
        json_object_set_new(set, "tool_choice", json_string(s->tool_choice));
    json_t *h = json_pack("{s:s, s:i, s:s, s:s, s:o?, s:o?}", "format", TRANSCRIPT_FORMAT, "version",
                          TRANSCRIPT_VERSION, "k3chat", k3_version(), "created", when, "model", model,
                          "settings", set);
    if (h && c->tools) { /* the declarations as given (a JSON array; kept as text if jansson cannot) */
        json_t *t = json_loads(c->tools, JSON_DECODE_ANY, NULL);
        json_object_set_new(h, "tools", t ? t : json_string(c->tools));
    }
    if (add_unknown(h, c->hdr_extra)) { /* a header without them would lose them for good */
        json_decref(h);
        return NULL;
    }
    return h;
}

static json_t *stats_json(const k3_turn_stats *t) {
    json_t *o = json_pack("{s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:b, s:s}", "prompt_tokens",
                          t->n_prompt, "cached_tokens", t->n_cached, "prefill_tokens", t->n_prefill,
                          "completion_tokens", t->n_gen, "think_tokens", t->n_think, "prefill_s",
                          t->t_prefill, "decode_s", t->t_gen, "ttft_s", t->ttft, "think_s", t->t_think,
                          "tok_s", t->tok_s, "think", t->think, "stop", k3_stop_str(t->stop));
    if (o && t->has_sampling) {
        const k3_sampler_params *p = &t->sampling;
        json_t                  *x =
            json_pack("{s:o, s:o, s:o, s:i, s:o}", "temperature", jfloat(p->temp), "top_p", jfloat(p->top_p),
                      "min_p", jfloat(p->min_p), "top_k", p->top_k, "seed", jseed(p->seed));
        if (!x || json_object_update(o, x)) {
            json_decref(o);
            o = NULL;
        }
        json_decref(x);
    }
    return o;
}

/* A JSON string of text that should be UTF-8 (k3_conv_add refuses anything else); were a
 * message ever to hold invalid bytes, they are written as U+FFFD rather than failing the
 * whole file. */
static json_t *jtext(const char *s) {
    json_t *j = json_string(s);
    char   *fixed;
    if (!j && k3_utf8_repair(s, strlen(s), &fixed, NULL) > 0) {
        j = json_string(fixed);
        free(fixed);
    }
    return j;
}

json_t *k3_content_json(const char *content, const size_t *parts, int n_parts) {
    size_t n = strlen(content), sum = 0;
    for (int k = 0; parts && k < n_parts; k++)
        sum += parts[k];
    if (!parts || n_parts < 2 || sum != n)
        return jtext(content);
    json_t *a  = json_array();
    size_t  at = 0;
    for (int k = 0; a && k < n_parts; at += parts[k++]) {
        char *s = k3_malloc(parts[k] + 1);
        if (s) {
            memcpy(s, content + at, parts[k]);
            s[parts[k]] = 0;
        }
        json_t *p = s ? json_pack("{s:s, s:o}", "type", "text", "text", jtext(s)) : NULL;
        free(s);
        if (!p || json_array_append_new(a, p)) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

static json_t *msg_json(const k3_msg *m) {
    json_t *o = json_pack("{s:s, s:o}", "role", conv_role_str(m->role), "content",
                          k3_content_json(m->content, m->parts, m->n_parts));
    if (!o)
        return NULL;
    int bad = 0;
    if (m->reasoning)
        bad |= json_object_set_new(o, "reasoning_content", jtext(m->reasoning));
    if (m->n_tool_calls > 0) { /* the OpenAI shape: arguments as a JSON string */
        json_t *a = json_array();
        for (int i = 0; a && i < m->n_tool_calls; i++)
            bad |= json_array_append_new(
                a, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", m->tool_calls[i].id ? m->tool_calls[i].id : "",
                             "type", "function", "function", "name", m->tool_calls[i].name, "arguments",
                             m->tool_calls[i].arguments ? m->tool_calls[i].arguments : ""));
        bad |= json_object_set_new(o, "tool_calls", a);
    }
    if (m->tool_call_id)
        bad |= json_object_set_new(o, "tool_call_id", jtext(m->tool_call_id));
    if (m->tool_name)
        bad |= json_object_set_new(o, "name", jtext(m->tool_name));
    if (m->tools) { /* tools declared in place by a system message */
        json_t *t = json_loads(m->tools, JSON_DECODE_ANY, NULL);
        bad |= json_object_set_new(o, "tools", t ? t : jtext(m->tools));
    }
    if (m->interrupted)
        bad |= json_object_set_new(o, "interrupted", json_true());
    if (m->ids && m->n_ids > 0) {
        json_t *a = json_array();
        for (int i = 0; a && i < m->n_ids; i++)
            bad |= json_array_append_new(a, json_integer(m->ids[i]));
        bad |= json_object_set_new(o, "token_ids", a);
    }
    if (m->has_stats)
        bad |= json_object_set_new(o, "stats", stats_json(&m->stats));
    bad |= add_unknown(o, m->extra);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Message i of c as its transcript line: the system prompt says since when it was set
 * mid-conversation ("since": how many of the other messages came before it). */
static json_t *line_json(const k3_conv *c, int i) {
    json_t *o = msg_json(&c->msgs[i]);
    if (o && i == 0 && c->msgs[0].role == K3_ROLE_SYSTEM && c->sys_since > 0 &&
        json_object_set_new(o, "since", json_integer(c->sys_since))) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

/* Abandoned messages whose branch point is at (or, with last, past the end): each marked with
 * "abandoned": its branch number. */
static void abandoned_lines(const k3_conv *c, sbuf *b, int at, int last) {
    for (int k = 0; k < c->n_aban; k++) {
        const conv_aban *a = &c->aban[k];
        if (a->at != at && !(last && a->at > at))
            continue;
        json_t *o = msg_json(&a->m);
        if (o && json_object_set_new(o, "abandoned", json_integer(a->branch))) {
            json_decref(o);
            o = NULL;
        }
        sb_json_line(b, o);
    }
}

/* The whole file: header + messages [0, n), abandoned branches before their branch point. */
static void transcript_text(const k3_conv *c, sbuf *b) {
    sb_json_line(b, header_json(c));
    for (int i = 0; i < c->n_msgs; i++) {
        abandoned_lines(c, b, i, 0);
        sb_json_line(b, line_json(c, i));
    }
    abandoned_lines(c, b, c->n_msgs, 1);
}

/* ==== durable writes ======================================================= */

static k3_status io_err(const char *path, const char *what, int e) {
    return k3_err(K3_ERR_IO, "%s: %s: %s (errno %d)", path, what, strerror(e), e);
}

static k3_status write_all(int fd, const char *p, size_t n, const char *path) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return io_err(path, "write failed", errno);
        if (w == 0)
            return io_err(path, "write failed", ENOSPC);
        p += w;
        n -= (size_t)w;
    }
    return K3_OK;
}

/* The directory path is in ("." for a bare name), malloc'd; NULL when out of memory. */
static char *dir_of(const char *path) {
    char *d = k3_strdup(path);
    if (!d)
        return NULL;
    char *slash = strrchr(d, '/');
    if (slash == d)
        d[1] = 0;
    else if (slash)
        *slash = 0;
    else
        strcpy(d, ".");
    return d;
}

static k3_status fsync_dir_of(const char *path) {
    char *d = dir_of(path);
    if (!d)
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", path);
    k3_status st = K3_OK;
    int       fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        st = io_err(d, "cannot open directory to sync it", errno);
    else if (fsync(fd) != 0 && errno != EINVAL)
        st = io_err(d, "fsync of directory failed", errno);
    if (fd >= 0)
        close(fd);
    free(d);
    return st;
}

/* Replaces path with the n bytes of p: temp file, fsync, rename, fsync dir. The file written
 * (device, inode, size) goes to *out when out is not NULL. */
static k3_status atomic_write(const char *path, const char *p, size_t n, struct stat *out) {
    size_t    tl  = strlen(path) + 32;
    char     *tmp = k3_malloc(tl);
    k3_status st  = K3_OK;
    if (!tmp)
        return k3_err(K3_ERR_NOMEM, "%s: out of memory", path);
    snprintf(tmp, tl, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        /* ENOENT: which directory is missing, the current one too (removed while k3chat ran) */
        int         e = errno;
        char       *d = e == ENOENT ? dir_of(path) : NULL;
        char        cwd[2];
        struct stat sb;
        if (d && path[0] != '/' && !getcwd(cwd, sizeof cwd) && errno == ENOENT)
            st = k3_err(K3_ERR_IO,
                        "%s: cannot create a temporary file next to it: the current directory was removed "
                        "(errno %d); give a path from /",
                        path, e);
        else if (d && stat(d, &sb) != 0 && errno == ENOENT)
            st = k3_err(
                K3_ERR_IO,
                "%s: cannot create a temporary file next to it: directory %s does not exist (errno %d)", path,
                d, e);
        else
            st = io_err(path, "cannot create a temporary file next to it", e);
        free(d);
        free(tmp);
        return st;
    }
    if (fchmod(fd, 0600) != 0) { /* conversations are private */
        st = io_err(tmp, "chmod failed", errno);
        goto fail;
    }
    if ((st = write_all(fd, p, n, path)))
        goto fail;
    if (fsync(fd) != 0) {
        st = io_err(tmp, "fsync failed", errno);
        goto fail;
    }
    if (out && fstat(fd, out) != 0) {
        st = io_err(tmp, "stat failed", errno);
        goto fail;
    }
    if (close(fd) != 0) {
        fd = -1;
        st = io_err(tmp, "close failed", errno);
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        st = io_err(path, "rename of the temporary file failed", errno);
        goto fail;
    }
    free(tmp);
    return fsync_dir_of(path);
fail:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    free(tmp);
    return st;
}

/* The autosave file is the one this conversation left, as it left it: the same file (device,
 * inode) and size. Another program may have replaced it since (another k3chat's /save FILE onto
 * it, an editor's save), written to it or removed it; the autosave then writes no more there. */
static int file_is_ours(const k3_conv *c, const struct stat *sb) {
    return S_ISREG(sb->st_mode) && sb->st_dev == c->as_dev && sb->st_ino == c->as_ino &&
           sb->st_size == c->as_size;
}

static void note_file(k3_conv *c, const struct stat *sb) {
    c->as_dev  = sb->st_dev;
    c->as_ino  = sb->st_ino;
    c->as_size = sb->st_size;
}

/* Appends n bytes to the autosave file with one write; on failure the file is cut back to its old
 * size. *theirs: the file is not as c left it (file_is_ours), before the write (nothing written)
 * or after it (renamed over while it was written: the lines went to the old file). */
static k3_status durable_append(k3_conv *c, const char *p, size_t n, int *theirs) {
    const char *path = c->autosave_path;
    struct stat sb, now;
    k3_status   st = K3_OK;
    int         fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    *theirs        = 0;
    if (fd < 0 && errno == ENOENT) {
        *theirs = 1; /* removed */
        return K3_OK;
    }
    if (fd < 0)
        return io_err(path, "cannot open for appending", errno);
    if (fstat(fd, &sb) != 0) {
        st = io_err(path, "stat failed", errno);
        goto done;
    }
    if (!file_is_ours(c, &sb)) {
        *theirs = 1;
        goto done;
    }
    /* one write(2) normally; a short one is retried to learn why (ENOSPC, EFBIG, EIO) */
    if ((st = write_all(fd, p, n, path))) {
        if (ftruncate(fd, sb.st_size) != 0)
            K3_LOG_WARN("%s: could not cut back a partial append: %s", path, strerror(errno));
        goto done;
    }
    if (fsync(fd) != 0)
        st = io_err(path, "fsync failed", errno);
    else if (fstat(fd, &sb) != 0)
        st = io_err(path, "stat failed", errno);
    else if (stat(path, &now) != 0 || now.st_dev != sb.st_dev || now.st_ino != sb.st_ino)
        *theirs = 1;
    else
        note_file(c, &sb);
done:
    close(fd);
    return st;
}

static k3_status write_text_file(const char *path, const sbuf *b, struct stat *out) {
    if (b->oom)
        return k3_err(K3_ERR_NOMEM, "%s: out of memory building the file", path);
    return atomic_write(path, b->p ? b->p : "", b->n, out);
}

/* Messages [from, n_msgs) of c appended to its autosave file in one durable write. */
static k3_status append_msgs(k3_conv *c, int from, int *theirs) {
    sbuf b = {0};
    for (int i = from; i < c->n_msgs; i++)
        sb_json_line(&b, line_json(c, i));
    *theirs      = 0;
    k3_status st = b.oom ? k3_err(K3_ERR_NOMEM, "%s: out of memory", c->autosave_path)
                   : b.n ? durable_append(c, b.p, b.n, theirs)
                         : K3_OK;
    free(b.p);
    return st;
}

k3_status k3_conv_save(const k3_conv *c, const char *path) {
    sbuf b = {0};
    transcript_text(c, &b);
    k3_status st = write_text_file(path, &b, NULL);
    free(b.p);
    return st;
}

/* ==== autosave ============================================================= */

static k3_status mkdir_p(char *dir) {
    for (char *p = dir + 1;; p++) {
        if (*p != '/' && *p)
            continue;
        char save = *p;
        *p        = 0;
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            k3_status st = io_err(dir, "cannot create directory", errno);
            *p           = save;
            return st;
        }
        *p = save;
        if (!save)
            break;
    }
    return K3_OK;
}

/* Removes temporary files a killed k3chat left in dir (NAME.jsonl.tmp-XXXXXX, older than
 * a minute so that another running k3chat's write in progress is never touched). */
static void remove_stale_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    time_t         now = time(NULL);
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".jsonl.tmp-"))
            continue;
        struct stat sb;
        if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
            now - sb.st_mtime > 60 && unlinkat(dirfd(d), e->d_name, 0) == 0)
            K3_LOG_INFO("autosave: removed %s/%s, left by an interrupted write", dir, e->d_name);
    }
    closedir(d);
}

k3_status k3_conv_autosave_enable(k3_conv *c, const char *dir) {
    char *d = NULL;
    if (dir) {
        d = k3_strdup(dir);
    } else {
        const char *x = getenv("XDG_DATA_HOME"), *h = getenv("HOME");
        size_t      n;
        if (x && x[0] == '/') { /* the XDG spec ignores relative paths */
            n = strlen(x) + sizeof "/k3chat";
            if ((d = k3_malloc(n)))
                snprintf(d, n, "%s/k3chat", x);
        } else if (h && *h) {
            n = strlen(h) + sizeof "/.local/share/k3chat";
            if ((d = k3_malloc(n)))
                snprintf(d, n, "%s/.local/share/k3chat", h);
        } else {
            return k3_err(K3_ERR_ARG, "neither XDG_DATA_HOME nor HOME is set");
        }
    }
    if (!d)
        return k3_err(K3_ERR_NOMEM, "autosave: out of memory");
    free(c->autosave_dir);
    c->autosave_dir = d;
    c->autosave_on  = 1;
    remove_stale_temps(d);
    return K3_OK;
}

const char *k3_conv_autosave_path(const k3_conv *c) {
    return c->autosave_path;
}

const char *k3_conv_autosave_error(const k3_conv *c) {
    return c->autosave_err[0] ? c->autosave_err : NULL;
}

/* A fresh file name in the autosave directory: YYYYmmdd-HHMMSS-PID[-N].jsonl (local time). */
static char *new_autosave_name(const k3_conv *c) {
    char      stamp[32] = "conversation";
    time_t    now       = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm))
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    size_t n = strlen(c->autosave_dir) + 64;
    char  *p = k3_malloc(n);
    for (int k = 1; p && k < 1000; k++) {
        if (k == 1)
            snprintf(p, n, "%s/%s-%ld.jsonl", c->autosave_dir, stamp, (long)getpid());
        else
            snprintf(p, n, "%s/%s-%ld-%d.jsonl", c->autosave_dir, stamp, (long)getpid(), k);
        if (access(p, F_OK) != 0)
            return p;
    }
    free(p);
    return NULL;
}

static int settings_equal(const k3_conv_settings *a, const k3_conv_settings *b) {
    return a->think == b->think && !strcmp(a->effort, b->effort) && a->max_tokens == b->max_tokens &&
           a->sampling.temp == b->sampling.temp && a->sampling.top_p == b->sampling.top_p &&
           a->sampling.min_p == b->sampling.min_p && a->sampling.top_k == b->sampling.top_k &&
           a->sampling.seed == b->sampling.seed && !strcmp(a->tool_choice, b->tool_choice);
}

int conv_autosave_appends(const k3_conv *c) {
    return c->autosave_path && !c->rewrite && settings_equal(&c->set, &c->saved_set);
}

/* The autosave file is another program's now (file_is_ours): the conversation goes whole to a
 * new file, and the old one stays as that program left it. A copy that holds the newest messages
 * only (k3_conv_copy_unsaved) cannot write the whole conversation: an error. */
static k3_status autosave_elsewhere(k3_conv *c, char **old) {
    if (c->tail_only)
        return k3_err(K3_ERR_IO,
                      "%s: changed by another program since the last autosave (replaced, removed or "
                      "written to); left as it is, the turn is kept in memory",
                      c->autosave_path);
    *old             = c->autosave_path;
    c->autosave_path = NULL;
    return K3_OK;
}

static k3_status autosave_write(k3_conv *c) {
    int has_turn = 0;
    for (int i = 0; i < c->n_msgs; i++)
        has_turn |= c->msgs[i].role != K3_ROLE_SYSTEM;
    if (!has_turn && !c->autosave_path)
        return K3_OK; /* nothing worth a file yet */
    if (c->gate && !c->gate(c->gate_ud))
        return K3_OK;       /* another writer has the file (k3_conv_set_autosave_gate) */
    char       *old = NULL; /* the file left to another program, NULL: none */
    struct stat sb;
    k3_status   st = K3_OK;
    int         theirs;
    if (conv_autosave_appends(c)) {
        if ((st = append_msgs(c, c->n_saved, &theirs)) || (theirs && (st = autosave_elsewhere(c, &old))))
            return st;
    } else if (c->autosave_path && (stat(c->autosave_path, &sb) != 0 || !file_is_ours(c, &sb))) {
        if ((st = autosave_elsewhere(c, &old)))
            return st;
    }
    if (!c->autosave_path || !conv_autosave_appends(c)) { /* a whole file */
        int fresh = !c->autosave_path;
        if (fresh) {
            char *dir = k3_strdup(c->autosave_dir);
            st        = dir ? mkdir_p(dir) : k3_err(K3_ERR_NOMEM, "autosave: out of memory");
            free(dir);
            char *p = st ? NULL : new_autosave_name(c);
            if (!st && !p)
                st = k3_err(K3_ERR_IO, "%s: no free autosave file name", c->autosave_dir);
            if (st) {
                c->autosave_path = old; /* the next autosave finds it someone else's again */
                return st;
            }
            c->autosave_path = p;
        }
        sbuf b = {0};
        transcript_text(c, &b);
        st = write_text_file(c->autosave_path, &b, &sb);
        free(b.p);
        if (st) { /* a new name is not kept for a file that was never made */
            if (fresh) {
                free(c->autosave_path);
                c->autosave_path = old;
            }
            return st;
        }
        note_file(c, &sb);
    }
    if (old) {
        K3_LOG_WARN("autosave: %s was changed by another program since this k3chat wrote it (replaced, "
                    "removed or written to); it is left as it is, and the conversation is autosaved whole "
                    "in %s from now on",
                    old, c->autosave_path);
        free(old);
    }
    c->n_saved   = c->n_msgs;
    c->rewrite   = 0;
    c->saved_set = c->set;
    return K3_OK;
}

k3_status k3_conv_autosave(k3_conv *c) {
    if (!c->autosave_on)
        return K3_OK;
    k3_status st = autosave_write(c);
    if (st) {
        snprintf(c->autosave_err, sizeof c->autosave_err, "%s", k3_errmsg());
        /* info only: the caller reports the failure (k3_conv_autosave_error), once */
        K3_LOG_INFO("autosave: %s (the conversation is still in memory)", c->autosave_err);
    } else {
        c->autosave_err[0] = 0;
    }
    return st;
}

/* ==== loading ============================================================== */

/* Parsing context: file name and line for messages. */
typedef struct lctx {
    const char *path;
    int         line;
} lctx;

#define LERR(L, ...) lerr((L), __VA_ARGS__)
static k3_status lerr(const lctx *L, const char *fmt, ...) K3_PRINTF(2, 3);
static k3_status lerr(const lctx *L, const char *fmt, ...) {
    char    msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return k3_err(K3_ERR_FORMAT, "%s:%d: %s", L->path, L->line, msg);
}

/* What a value is, for a message: an integer's value (so "is -1, expected >= 0", not "is an
 * integer, expected an integer"), else its type. buf: 32 bytes. */
static const char *jwhat(const json_t *j, char *buf, size_t n);

static const char *jtype(const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

static const char *jwhat(const json_t *j, char *buf, size_t n) {
    if (!json_is_integer(j))
        return jtype(j);
    snprintf(buf, n, "%lld", (long long)json_integer_value(j));
    return buf;
}

/* Typed getters: absent keys leave *out alone; a wrong type is an error naming the key. */
static k3_status get_num(const lctx *L, json_t *o, const char *obj, const char *key, double *out) {
    json_t *v = json_object_get(o, key);
    if (!v)
        return K3_OK;
    if (!json_is_number(v))
        return LERR(L, "%s\"%s\" is %s, expected a number", obj, key, jtype(v));
    *out = json_number_value(v);
    return K3_OK;
}

static k3_status get_int(const lctx *L, json_t *o, const char *obj, const char *key, long long lo,
                         long long hi, int *out) {
    json_t *v = json_object_get(o, key);
    if (!v)
        return K3_OK;
    if (!json_is_integer(v))
        return LERR(L, "%s\"%s\" is %s, expected an integer", obj, key, jtype(v));
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return LERR(L, "%s\"%s\" = %lld is outside %lld..%lld", obj, key, x, lo, hi);
    *out = (int)x;
    return K3_OK;
}

static k3_status get_bool(const lctx *L, json_t *o, const char *obj, const char *key, int *out) {
    json_t *v = json_object_get(o, key);
    if (!v)
        return K3_OK;
    if (!json_is_boolean(v))
        return LERR(L, "%s\"%s\" is %s, expected true or false", obj, key, jtype(v));
    *out = json_is_true(v);
    return K3_OK;
}

static k3_status get_seed(const lctx *L, json_t *o, const char *obj, uint64_t *out) {
    json_t *v = json_object_get(o, "seed");
    if (!v)
        return K3_OK;
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return K3_OK;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char       *end;
        errno                = 0;
        unsigned long long x = strtoull(s, &end, 10);
        if (*s >= '0' && *s <= '9' && !*end && !errno) {
            *out = x;
            return K3_OK;
        }
    }
    char w[32];
    return LERR(L, "%s\"seed\" is %s, expected a non-negative integer", obj, jwhat(v, w, sizeof w));
}

/* A string field: absent or null leaves *out alone; strings are copied. */
static k3_status get_str(const lctx *L, json_t *o, const char *obj, const char *key, const char **out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return K3_OK;
    if (!json_is_string(v))
        return LERR(L, "%s\"%s\" is %s, expected a string", obj, key, jtype(v));
    *out = json_string_value(v);
    return K3_OK;
}

#define TRY(x)                                                                                               \
    do {                                                                                                     \
        if ((st = (x)))                                                                                      \
            return st;                                                                                       \
    } while (0)

/* ---- members a save would not write back ----
 * A line may hold members this version does not know (a newer k3chat's, another tool's, a hand
 * edit's) and known ones it reads but does not store: a tool_call_id on a user message, "tools"
 * on an assistant message or "tools": [] on a system one, a stats' top_p without its
 * temperature, a null or false where absence means the same. What was read is written back
 * (header_json, line_json) and compared with the line: each member the writer would not write
 * is kept as it was (k3_msg.extra, the header's hdr_extra) and added back on save
 * (merge_unknown), so a load and save loses nothing. The writer is the one list of what is
 * kept: no table of known names to fall behind it. */

/* What of in (a value as read) out (the same value as written) lacks: the members of an object
 * that out's lacks, recursively, and of an array of objects as long as out's, element by element
 * ({} where an element lacks nothing); NULL when nothing, or out of memory (*bad set). */
static json_t *unwritten_value(json_t *in, json_t *out, int *bad);

/* Adds to x the members of in (a line as read) that out (the same line as written) lacks, and
 * what it lacks of the others (unwritten_value); skip (NULL: none) is a member out holds under
 * another name (reasoning read from "thinking"). Returns nonzero on failure. */
static int unwritten_members(json_t *x, json_t *in, json_t *out, const char *skip) {
    const char *k;
    json_t     *v;
    int         bad = 0;
    json_object_foreach(in, k, v) {
        json_t *w = json_object_get(out, k), *y;
        if (skip && !strcmp(k, skip))
            continue;
        if (!w)
            bad |= json_object_set(x, k, v);
        else if ((y = unwritten_value(v, w, &bad)))
            bad |= json_object_set_new(x, k, y);
    }
    return bad;
}

static json_t *unwritten_value(json_t *in, json_t *out, int *bad) {
    json_t *y = NULL;
    if (json_is_object(in) && json_is_object(out)) {
        y = json_object();
        *bad |= !y || unwritten_members(y, in, out, NULL);
    } else if (json_is_array(in) && json_is_array(out) && json_array_size(in) == json_array_size(out)) {
        int any = 0;
        y       = json_array();
        for (size_t i = 0; y && i < json_array_size(in); i++) {
            json_t *e = unwritten_value(json_array_get(in, i), json_array_get(out, i), bad);
            any |= e != NULL;
            *bad |= json_array_append_new(y, e ? e : json_object());
        }
        *bad |= !y;
        if (!any) {
            json_decref(y);
            y = NULL;
        }
    }
    if (y && json_is_object(y) && !json_object_size(y)) {
        json_decref(y);
        y = NULL;
    }
    return y;
}

/* x's text for k3_msg.extra / hdr_extra (NULL when x is empty); takes x. */
static k3_status unknown_text(const lctx *L, json_t *x, int bad, char **out) {
    *out = NULL;
    if (!bad && x && json_object_size(x))
        bad = !(*out = json_dumps(x, JSON_COMPACT));
    json_decref(x);
    return bad || !x ? k3_err(K3_ERR_NOMEM, "%s:%d: out of memory", L->path, L->line) : K3_OK;
}

/* The header's members that header_json would not write back from what was read of h, into
 * c->hdr_extra. "model" is not kept: the header names the model loaded when it is written. */
static k3_status header_extra(const lctx *L, json_t *h, k3_conv *c) {
    free(c->hdr_extra);
    c->hdr_extra = NULL;
    json_t *w = header_json(c), *x = json_object();
    int     bad = !w || !x || unwritten_members(x, h, w, "model");
    json_decref(w);
    return unknown_text(L, x, bad, &c->hdr_extra);
}

static k3_status parse_header(const lctx *L, json_t *h, k3_conv *c, k3_load_info *info) {
    k3_status   st;
    const char *fmt = NULL;
    json_t     *v   = json_object_get(h, "version");
    TRY(get_str(L, h, "", "format", &fmt));
    if (!fmt || strcmp(fmt, TRANSCRIPT_FORMAT))
        return LERR(L, "neither a k3chat transcript header (\"format\": \"%s\") nor a message (\"role\")",
                    TRANSCRIPT_FORMAT);
    if (!json_is_integer(v))
        return LERR(L, "header \"version\" is %s, expected an integer", v ? jtype(v) : "missing");
    if (json_integer_value(v) != TRANSCRIPT_VERSION)
        return LERR(L, "unknown transcript version %lld (this k3chat reads version %d)",
                    json_integer_value(v), TRANSCRIPT_VERSION);
    const char *ver = NULL, *dir = NULL, *fp = NULL;
    TRY(get_str(L, h, "header ", "k3chat", &ver));
    json_t *model = json_object_get(h, "model");
    if (model && !json_is_object(model))
        return LERR(L, "header \"model\" is %s, expected an object", jtype(model));
    if (model) {
        TRY(get_str(L, model, "model.", "dir", &dir));
        TRY(get_str(L, model, "model.", "config_fnv64", &fp));
    }
    if (info) {
        snprintf(info->version, sizeof info->version, "%s", ver ? ver : "");
        snprintf(info->model_dir, sizeof info->model_dir, "%s", dir ? dir : "");
        snprintf(info->config_fnv64, sizeof info->config_fnv64, "%s", fp ? fp : "");
    }
    json_t *tools = json_object_get(h, "tools");
    if (tools && !json_is_null(tools)) {
        char *t = json_is_string(tools) ? strdup(json_string_value(tools)) : json_dumps(tools, JSON_COMPACT);
        if (!t)
            return k3_err(K3_ERR_NOMEM, "%s:%d: out of memory", L->path, L->line);
        st = k3_conv_set_tools(c, t);
        free(t);
        if (st)
            return st;
    }
    json_t *s = json_object_get(h, "settings");
    if (!s)
        return header_extra(L, h, c);
    if (info)
        info->has_settings = 1;
    if (!json_is_object(s))
        return LERR(L, "header \"settings\" is %s, expected an object", jtype(s));
    k3_conv_settings *cs   = &c->set;
    double            temp = cs->sampling.temp, top_p = cs->sampling.top_p, min_p = cs->sampling.min_p;
    const char       *effort = NULL;
    TRY(get_num(L, s, "settings.", "temperature", &temp));
    TRY(get_num(L, s, "settings.", "top_p", &top_p));
    TRY(get_num(L, s, "settings.", "min_p", &min_p));
    TRY(get_int(L, s, "settings.", "top_k", 0, INT_MAX, &cs->sampling.top_k));
    TRY(get_seed(L, s, "settings.", &cs->sampling.seed));
    TRY(get_bool(L, s, "settings.", "think", &cs->think));
    TRY(get_str(L, s, "settings.", "effort", &effort));
    const char *choice = NULL;
    TRY(get_str(L, s, "settings.", "tool_choice", &choice));
    if (choice && strlen(choice) >= sizeof cs->tool_choice)
        return LERR(L, "settings.\"tool_choice\" '%.40s' is not auto, required or none", choice);
    if (choice)
        strcpy(cs->tool_choice, choice);
    TRY(get_int(L, s, "settings.", "max_tokens", 0, INT_MAX, &cs->max_tokens));
    int bits = 0;
    TRY(get_int(L, s, "settings.", "bits", 0, 64, &bits));
    TRY(get_int(L, s, "settings.", "mla_bits", 0, 64, &bits));
    TRY(get_int(L, s, "settings.", "head_bits", 0, 64, &bits));
    if (effort) {
        if (strlen(effort) >= sizeof cs->effort)
            return LERR(L, "settings.\"effort\" '%s' is not low, high or max", effort);
        strcpy(cs->effort, effort);
    }
    cs->sampling.temp  = (float)temp;
    cs->sampling.top_p = (float)top_p;
    cs->sampling.min_p = (float)min_p;
    if ((st = conv_check_settings(cs, "settings"))) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", k3_errmsg());
        return LERR(L, "%s", msg);
    }
    return header_extra(L, h, c);
}

static k3_status parse_stats(const lctx *L, json_t *s, k3_turn_stats *t) {
    k3_status   st;
    const char *stop = NULL;
    if (!json_is_object(s))
        return LERR(L, "\"stats\" is %s, expected an object", jtype(s));
    TRY(get_int(L, s, "stats.", "prompt_tokens", 0, INT_MAX, &t->n_prompt));
    TRY(get_int(L, s, "stats.", "cached_tokens", 0, INT_MAX, &t->n_cached));
    TRY(get_int(L, s, "stats.", "prefill_tokens", 0, INT_MAX, &t->n_prefill));
    TRY(get_int(L, s, "stats.", "completion_tokens", 0, INT_MAX, &t->n_gen));
    TRY(get_int(L, s, "stats.", "think_tokens", 0, INT_MAX, &t->n_think));
    TRY(get_num(L, s, "stats.", "prefill_s", &t->t_prefill));
    TRY(get_num(L, s, "stats.", "decode_s", &t->t_gen));
    TRY(get_num(L, s, "stats.", "ttft_s", &t->ttft));
    TRY(get_num(L, s, "stats.", "think_s", &t->t_think));
    TRY(get_num(L, s, "stats.", "tok_s", &t->tok_s));
    double temp = NAN, top_p = 1, min_p = 0; /* JSON has no NaN: NAN is "not recorded" */
    TRY(get_num(L, s, "stats.", "temperature", &temp));
    TRY(get_num(L, s, "stats.", "top_p", &top_p));
    TRY(get_num(L, s, "stats.", "min_p", &min_p));
    TRY(get_int(L, s, "stats.", "top_k", 0, INT_MAX, &t->sampling.top_k));
    TRY(get_seed(L, s, "stats.", &t->sampling.seed));
    if (!isnan(temp)) { /* the sampling this turn used is known: the header's ranges */
        k3_sampler_params p = t->sampling;
        p.temp              = (float)temp;
        p.top_p             = (float)top_p;
        p.min_p             = (float)min_p;
        if (conv_check_sampling(&p, "stats")) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", k3_errmsg());
            return LERR(L, "%s", msg);
        }
        t->sampling     = p;
        t->has_sampling = 1;
    }
    TRY(get_bool(L, s, "stats.", "think", &t->think));
    TRY(get_str(L, s, "stats.", "stop", &stop));
    if (stop) {
        static const k3_stop all[] = {K3_STOP_NONE,    K3_STOP_EOS,    K3_STOP_MAX_TOKENS,
                                      K3_STOP_CONTEXT, K3_STOP_CANCEL, K3_STOP_ERROR};
        size_t               i     = 0;
        while (i < sizeof all / sizeof all[0] && strcmp(stop, k3_stop_str(all[i])))
            i++;
        if (i == sizeof all / sizeof all[0])
            return LERR(L, "stats.\"stop\" '%s' is not eos, max_tokens, context, cancel or error", stop);
        t->stop = all[i];
    }
    return K3_OK;
}

/* ==== message content ==================================================== */

static int content_err(k3_content_err *e, k3_content_fault f, const char *path, const char *fmt, ...)
    K3_PRINTF(4, 5);
static int content_err(k3_content_err *e, k3_content_fault f, const char *path, const char *fmt, ...) {
    va_list ap;
    e->fault = f;
    snprintf(e->path, sizeof e->path, "%s", path);
    va_start(ap, fmt);
    vsnprintf(e->reason, sizeof e->reason, fmt, ap);
    va_end(ap);
    return -1;
}

/* A part is text as the release's encoder reads it (encoding_k3.py, _render_content_segments): any
 * part that is not an image ("image", "image_url") renders its "text", whatever its type says (the
 * Responses API's "input_text", say). A part with no "text" under another type (audio, a file, a
 * Responses "input_image") is media, as an image is. OpenAI's refusal part of an assistant message,
 * {"type": "refusal", "refusal": ...}, is what the assistant said: its "refusal" is its text, as
 * vLLM renders it (it was refused as media). */
int k3_content_parse(const json_t *cv, char **out, size_t **parts, int *n_parts, k3_content_err *e) {
    json_t *v = (json_t *)(uintptr_t)cv; /* jansson's getters take non-const */
    *out      = NULL;
    if (parts) {
        *parts   = NULL;
        *n_parts = 0;
    }
    if (!v || json_is_null(v) || json_is_string(v)) {
        const char *s = v ? json_string_value(v) : NULL;
        size_t      n = s ? json_string_length(v) : 0;
        if ((*out = k3_malloc(n + 1))) {
            memcpy(*out, s ? s : "", n);
            (*out)[n] = 0;
        }
        return *out ? 0 : content_err(e, K3_CONTENT_NOMEM, "", "is too long (out of memory)");
    }
    if (!json_is_array(v))
        return content_err(e, K3_CONTENT_TYPE, "", "is %s, expected a string or an array of text parts",
                           jtype(v));
    size_t  n = json_array_size(v), k, *len = parts && n > 1 ? k3_calloc(n, sizeof *len) : NULL;
    k3_buf  b = {0};
    json_t *part;
    char    at[48];
    int     rc = 0;
    if (parts && n > 1 && !len)
        return content_err(e, K3_CONTENT_NOMEM, "", "is too long (out of memory)");
    json_array_foreach(v, k, part) {
        json_t     *tv   = json_is_object(part) ? json_object_get(part, "type") : NULL;
        const char *type = json_string_value(tv);
        const char *key  = type && !strcmp(type, "refusal") ? "refusal" : "text"; /* its text's member */
        json_t     *text = json_is_object(part) ? json_object_get(part, key) : NULL;
        snprintf(at, sizeof at, "[%zu]", k);
        if (!json_is_object(part))
            rc = content_err(e, K3_CONTENT_TYPE, at,
                             "is %s, expected a {\"type\": \"text\", \"text\": ...} part", jtype(part));
        else if (tv && !type) {
            snprintf(at, sizeof at, "[%zu].type", k);
            rc = content_err(e, K3_CONTENT_TYPE, at, "is %s, expected \"text\"", jtype(tv));
        } else if (type && (!strcmp(type, "image") || !strcmp(type, "image_url") ||
                            (strcmp(type, "text") && strcmp(type, "refusal") && !text)))
            rc = content_err(
                e, K3_CONTENT_MEDIA, at,
                "is of type '%.40s': only text parts are supported (images and other media are not)", type);
        else if (!json_is_string(text)) {
            snprintf(at, sizeof at, "[%zu].%s", k, key);
            rc = text ? content_err(e, K3_CONTENT_TYPE, at, "is %s, expected a string", jtype(text))
                      : content_err(e, K3_CONTENT_TYPE, at, "is missing (a %s part's string)", key);
        } else if (k3_buf_add(&b, json_string_value(text), json_string_length(text)))
            rc = content_err(e, K3_CONTENT_NOMEM, "", "is too long (out of memory)");
        else if (len)
            len[k] = json_string_length(text);
        if (rc)
            break;
    }
    if (!rc && !(*out = b.p ? b.p : k3_strdup("")))
        rc = content_err(e, K3_CONTENT_NOMEM, "", "is too long (out of memory)");
    if (rc) {
        free(b.p);
        free(len);
        return rc;
    }
    if (len) {
        *parts   = len;
        *n_parts = (int)n;
    }
    return 0;
}

/* k3_content_parse's error on line L, under the field's name. */
static k3_status content_lerr(const lctx *L, const char *field, const k3_content_err *ce) {
    if (ce->fault == K3_CONTENT_NOMEM)
        return k3_err(K3_ERR_NOMEM, "%s:%d: out of memory", L->path, L->line);
    return LERR(L, "\"%s\"%s %s", field, ce->path, ce->reason);
}

/* "tool_calls": [{"id", "type": "function", "function": {"name", "arguments": string}}];
 * m->tool_calls points into the JSON (the caller frees only the array). */
static k3_status parse_tool_calls(const lctx *L, json_t *v, k3_msg *m) {
    if (!v || json_is_null(v))
        return K3_OK;
    if (!json_is_array(v))
        return LERR(L, "\"tool_calls\" is %s, expected an array", jtype(v));
    size_t n = json_array_size(v);
    if (!n)
        return K3_OK;
    m->tool_calls = k3_calloc(n, sizeof *m->tool_calls);
    if (!m->tool_calls)
        return k3_err(K3_ERR_NOMEM, "%s:%d: out of memory", L->path, L->line);
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(v, i), *f = json_is_object(c) ? json_object_get(c, "function") : NULL;
        json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments"),
               *id = json_object_get(c, "id");
        if (!json_is_object(f) || !json_is_string(name) || !json_string_length(name))
            return LERR(L, "\"tool_calls\"[%zu] is not {\"id\", \"function\": {\"name\", \"arguments\"}}", i);
        if (args && !json_is_null(args) && !json_is_string(args))
            return LERR(L, "\"tool_calls\"[%zu].function.arguments is %s, expected a JSON string", i,
                        jtype(args));
        if (id && !json_is_null(id) && !json_is_string(id))
            return LERR(L, "\"tool_calls\"[%zu].id is %s, expected a string", i, jtype(id));
        m->tool_calls[i] = (k3_tool_call){.id        = json_string_value(id),
                                          .name      = json_string_value(name),
                                          .arguments = json_string_value(args)};
        m->n_tool_calls  = (int)i + 1;
    }
    return K3_OK;
}

/* ---- a message line ----
 * parse_msg reads a line's members in a fixed order, each step below checking its own (the first
 * error found is the one reported), into one message_in; the line's members a save would not
 * write are kept (msg_unwritten), and the message is pushed as the active history's or an
 * abandoned branch's. */

/* A message line as read: m's strings content, reasoning and tools, and its arrays tool_calls,
 * parts, ids and extra are owned (msg_in_free); tool_call_id, tool_name and the calls' strings
 * point into the line's JSON. */
typedef struct msg_in {
    k3_msg      m;
    const char *role;   /* as written ("developer" for a system message)                      */
    const char *rkey;   /* the member the reasoning was read from, NULL: none                 */
    long long   branch; /* "abandoned": its branch number, 0: the active history              */
    long long   since;  /* "since" of a system prompt set mid-chat, 0: none                   */
} msg_in;

static void msg_in_free(msg_in *p) {
    free(p->m.content);
    free(p->m.reasoning);
    free(p->m.parts);
    free(p->m.ids);
    free(p->m.tool_calls);
    free(p->m.tools);
    free(p->m.extra);
}

/* "role": system (or developer, rendered as system: k3-chat.md), user, assistant or tool. */
static k3_status msg_role(const lctx *L, json_t *o, msg_in *p) {
    k3_status st;
    if (!json_object_get(o, "role"))
        return LERR(L, "message has no \"role\"");
    TRY(get_str(L, o, "", "role", &p->role));
    if (!p->role)
        return LERR(L, "\"role\" is null, expected \"system\", \"user\" or \"assistant\"");
    static const struct {
        const char *name;
        k3_role     role;
    } roles[] = {{"system", K3_ROLE_SYSTEM},
                 {"developer", K3_ROLE_SYSTEM},
                 {"user", K3_ROLE_USER},
                 {"assistant", K3_ROLE_ASSISTANT},
                 {"tool", K3_ROLE_TOOL}};
    for (size_t k = 0; k < sizeof roles / sizeof *roles; k++)
        if (!strcmp(p->role, roles[k].name))
            return p->m.role = roles[k].role, K3_OK;
    return LERR(L, "role '%s' is not system, user, assistant or tool", p->role);
}

/* The tool members: "tool_calls" (an assistant's), "tool_call_id" (kept on a tool result),
 * "name" (a tool's, or the speaker's: rendered name="..."), "tools" (declared in place by a
 * system message). */
static k3_status msg_tools(const lctx *L, json_t *o, msg_in *p) {
    k3_status   st;
    const char *tcid = NULL, *tname = NULL;
    TRY(parse_tool_calls(L, json_object_get(o, "tool_calls"), &p->m));
    if (p->m.n_tool_calls && p->m.role != K3_ROLE_ASSISTANT)
        return LERR(L, "a %s message has \"tool_calls\"; only assistant messages do", p->role);
    TRY(get_str(L, o, "", "tool_call_id", &tcid));
    TRY(get_str(L, o, "", "name", &tname));
    if (p->m.role == K3_ROLE_TOOL)
        p->m.tool_call_id = (char *)(uintptr_t)tcid;
    p->m.tool_name = (char *)(uintptr_t)tname;
    json_t *mt     = json_object_get(o, "tools");
    if (!mt || json_is_null(mt) || p->m.role != K3_ROLE_SYSTEM)
        return K3_OK;
    if (!json_is_array(mt))
        return LERR(L, "\"tools\" is %s, expected an array", jtype(mt));
    if (json_array_size(mt) && !(p->m.tools = json_dumps(mt, JSON_COMPACT)))
        return k3_err(K3_ERR_NOMEM, "%s:%d: out of memory", L->path, L->line);
    return K3_OK;
}

/* "content" (a string or text parts) and the reasoning: reasoning_content (ours, DeepSeek/vLLM),
 * reasoning, thinking, the first present; a string or text parts, as the server reads them; an
 * assistant's only. */
static k3_status msg_texts(const lctx *L, json_t *o, msg_in *p) {
    k3_content_err ce;
    if (k3_content_parse(json_object_get(o, "content"), &p->m.content, &p->m.parts, &p->m.n_parts, &ce))
        return content_lerr(L, "content", &ce);
    static const char *const rkeys[] = {"reasoning_content", "reasoning", "thinking"};
    for (size_t k = 0; k < 3 && !p->m.reasoning; k++) {
        json_t *rj = json_object_get(o, rkeys[k]);
        if (rj && !json_is_null(rj) && k3_content_parse(rj, &p->m.reasoning, NULL, NULL, &ce))
            return content_lerr(L, rkeys[k], &ce);
        if (p->m.reasoning)
            p->rkey = rkeys[k];
    }
    if (p->m.reasoning && p->m.role != K3_ROLE_ASSISTANT)
        return LERR(L, "a %s message has reasoning; only assistant messages do", p->role);
    return K3_OK;
}

/* "interrupted", "stats" and "token_ids" (each an integer >= 0, at most INT32_MAX). */
static k3_status msg_turn(const lctx *L, json_t *o, k3_msg *m) {
    k3_status st;
    TRY(get_bool(L, o, "", "interrupted", &m->interrupted));
    json_t *stats = json_object_get(o, "stats");
    if (stats) {
        TRY(parse_stats(L, stats, &m->stats));
        m->has_stats = 1;
    }
    json_t *ids = json_object_get(o, "token_ids");
    if (!ids)
        return K3_OK;
    if (!json_is_array(ids))
        return LERR(L, "\"token_ids\" is %s, expected an array of integers", jtype(ids));
    m->n_ids = (int)json_array_size(ids);
    if (!(m->ids = k3_malloc((size_t)m->n_ids * sizeof *m->ids + 1)))
        return k3_err(K3_ERR_NOMEM, "%s:%d: out of memory", L->path, L->line);
    for (int i = 0; i < m->n_ids; i++) {
        json_t *x = json_array_get(ids, (size_t)i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX) {
            char w[32];
            return LERR(L, "\"token_ids\"[%d] is %s, expected a token id (integer >= 0)", i,
                        jwhat(x, w, sizeof w));
        }
        m->ids[i] = (int32_t)json_integer_value(x);
    }
    return K3_OK;
}

/* Where the message goes: "abandoned": N marks a message of abandoned branch N (/edit; true is
 * 1), kept, not replayed; "since": N on the system prompt says it was set after N of the other
 * messages (/system mid-conversation), which were answered without it. */
static k3_status msg_place(const lctx *L, json_t *o, msg_in *p) {
    json_t *ab = json_object_get(o, "abandoned");
    char    w[32];
    if (ab && !json_is_null(ab)) {
        if (json_is_true(ab))
            p->branch = 1;
        else if (json_is_integer(ab) && json_integer_value(ab) >= 1 && json_integer_value(ab) <= INT32_MAX)
            p->branch = json_integer_value(ab);
        else if (!json_is_false(ab))
            return LERR(L, "\"abandoned\" is %s, expected a branch number (integer >= 1)",
                        jwhat(ab, w, sizeof w));
    }
    json_t *sj = json_object_get(o, "since");
    if (!sj || json_is_null(sj))
        return K3_OK;
    if (p->m.role != K3_ROLE_SYSTEM || p->branch)
        return LERR(L, "\"since\" is on a %s message; only the system prompt has it",
                    p->branch ? "abandoned" : p->role);
    if (!json_is_integer(sj) || json_integer_value(sj) < 0 || json_integer_value(sj) > INT32_MAX)
        return LERR(L, "\"since\" is %s, expected a message count (integer >= 0)", jwhat(sj, w, sizeof w));
    p->since = json_integer_value(sj);
    return K3_OK;
}

/* The members of line o that a save would not write into p->m.extra: the line as it would be
 * written (the message, its branch and its "since"; its long values, text and token ids, cut
 * short, as only objects and their members are compared; content parts keep their text)
 * against the line read. */
static k3_status msg_unwritten(const lctx *L, json_t *o, msg_in *p) {
    k3_msg shape    = p->m;
    shape.content   = p->m.n_parts > 1 ? p->m.content : "";
    shape.reasoning = p->m.reasoning ? "" : NULL;
    shape.n_ids     = p->m.n_ids > 1 ? 1 : p->m.n_ids;
    json_t *w = msg_json(&shape), *x = json_object();
    int     bad = !w || !x || (p->branch && json_object_set_new(w, "abandoned", json_integer(p->branch))) ||
              (p->since && json_object_set_new(w, "since", json_integer(p->since))) ||
              unwritten_members(x, o, w, p->rkey && strcmp(p->rkey, "reasoning_content") ? p->rkey : NULL);
    json_decref(w);
    return unknown_text(L, x, bad, &p->m.extra);
}

/* One message line o into c: its members read in order (the first error found is reported),
 * then the message pushed. */
/* A tool result the chat format can name (chat-format.c tool_run): by its own "name", by the call
 * of the last assistant message its tool_call_id answers, or by its place among the results that
 * follow that message. One it cannot (a hand edit dropped the assistant message, or the result
 * came from elsewhere) made every later turn fail with "message N: tool result: no tool name",
 * naming neither the file nor the line. */
static k3_status tool_result_named(const lctx *L, const k3_conv *c, const k3_msg *m) {
    if (m->role != K3_ROLE_TOOL || (m->tool_name && *m->tool_name))
        return K3_OK;
    int a = c->n_msgs - 1, k = 0;
    for (; a >= 0 && c->msgs[a].role != K3_ROLE_ASSISTANT; a--)
        k += c->msgs[a].role == K3_ROLE_TOOL;
    const k3_msg *am = a >= 0 ? &c->msgs[a] : NULL;
    for (int i = 0; am && m->tool_call_id && i < am->n_tool_calls; i++)
        if (am->tool_calls[i].id && !strcmp(am->tool_calls[i].id, m->tool_call_id) &&
            am->tool_calls[i].name && *am->tool_calls[i].name)
            return K3_OK;
    if (am && k < am->n_tool_calls && am->tool_calls[k].name && *am->tool_calls[k].name)
        return K3_OK;
    if (m->tool_call_id)
        return LERR(L,
                    "a tool result without \"name\" whose \"tool_call_id\" (\"%.60s\") answers no call %s; "
                    "give the tool's \"name\"",
                    m->tool_call_id,
                    am ? "of the assistant message before it" : "(no assistant message is before it)");
    return LERR(L, "a tool result without \"name\" or \"tool_call_id\", and %s; give the tool's \"name\"",
                am ? "more results than the assistant message before it made calls"
                   : "no assistant message before it made a call");
}

static k3_status parse_msg(const lctx *L, json_t *o, k3_conv *c) {
    msg_in    p  = {0};
    k3_status st = msg_role(L, o, &p);
    if (!st)
        st = msg_tools(L, o, &p);
    if (!st)
        st = msg_texts(L, o, &p);
    if (!st)
        st = msg_turn(L, o, &p.m);
    if (!st)
        st = msg_place(L, o, &p);
    if (!st)
        st = msg_unwritten(L, o, &p);
    if (!st && !p.branch)
        st = tool_result_named(L, c, &p.m);
    if (!st)
        st = p.branch ? conv_push_abandoned(c, &p.m, c->n_msgs, (int)p.branch) : conv_push(c, &p.m);
    if (!st && p.since)
        c->sys_since = (int)p.since;
    msg_in_free(&p);
    return st;
}

/* Parses one line (p[0,n), no newline) into c. Returns K3_ERR_FORMAT with the line. */
static k3_status parse_line(const lctx *L, const char *p, size_t n, k3_conv *c, k3_load_info *info,
                            int *json_syntax) {
    *json_syntax = 0;
    /* a raw NUL byte: JSON allows no control character, inside a string or out (a binary file, a
     * block of zeros left by a crash); said here by its byte, as the repaired copy below is a C
     * string and would end at it */
    const char *nul = memchr(p, 0, n);
    if (nul) {
        *json_syntax = 1;
        return LERR(L, "a NUL byte at byte %zu, which JSON does not allow (a binary file?)",
                    (size_t)(nul - p) + 1);
    }
    /* invalid UTF-8 (a Latin-1 byte, a cut character) becomes U+FFFD, as everywhere k3chat
     * reads text; the caller reports how many and where (k3_load_info) */
    char  *fixed = NULL;
    size_t first = 0;
    long   bad   = k3_utf8_repair(p, n, &fixed, &first);
    if (bad < 0)
        return k3_err(K3_ERR_NOMEM, "%s:%d: out of memory", L->path, L->line);
    json_error_t e;
    json_t      *j = json_loadb(bad ? fixed : p, bad ? strlen(fixed) : n, JSON_REJECT_DUPLICATES, &e);
    free(fixed);
    if (!j) {
        *json_syntax = 1;
        return LERR(L, "invalid JSON at column %d: %s", e.column,
                    json_error_code(&e) == json_error_null_character
                        ? "a \\u0000 (NUL) in a string, which a transcript cannot hold"
                        : e.text); /* not the library's flag name */
    }
    k3_status st;
    if (!json_is_object(j))
        st = LERR(L, "%s is %s, expected a JSON object", L->line == 1 ? "the header" : "the message",
                  jtype(j));
    else if (L->line == 1 && (json_object_get(j, "format") || !json_object_get(j, "role")))
        st = parse_header(L, j, c, info);
    else
        st = parse_msg(L, j, c);
    json_decref(j);
    if (!st && bad && info) {
        if (!info->utf8_fixed) {
            info->utf8_line = L->line;
            info->utf8_byte = (int)first + 1;
        }
        info->utf8_fixed += (int)bad;
    }
    return st;
}

k3_status k3_conv_load(k3_conv *c, const char *path, k3_load_info *info) {
    k3_load_info tmp_info;
    if (!info)
        info = &tmp_info;
    memset(info, 0, sizeof *info);
    /* a FIFO that nobody writes to opens (and reads as empty) instead of blocking the chat's
     * worker for good, and the chat's quit behind it */
    int   fd = k3_open_read(path, 0);
    FILE *f  = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return io_err(path, "cannot open", e);
    }
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) { /* read() would say only EISDIR */
        size_t pn = strlen(path);
        fclose(f);
        return k3_err(K3_ERR_IO,
                      "%s: is a directory, not a transcript (name a transcript file in it: %s%sNAME.jsonl)",
                      path, path, pn && path[pn - 1] == '/' ? "" : "/");
    }
    sbuf      b = {0};
    char      chunk[65536];
    size_t    n;
    k3_status st = K3_OK;
    errno        = 0;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        sb_add(&b, chunk, n);
        if (b.oom || b.n > TRANSCRIPT_MAX)
            break;
    }
    int rerr = ferror(f) ? (errno ? errno : EIO) : 0; /* a directory: EISDIR */
    fclose(f);
    k3_conv *nc = k3_conv_new();
    /* a UTF-8 byte order mark (some editors write one) is not part of the header (RFC 8259) */
    size_t bom = b.n >= 3 && !memcmp(b.p, "\xEF\xBB\xBF", 3) ? 3 : 0;
    if (rerr)
        st = io_err(path, "read failed", rerr);
    else if (b.oom || !nc)
        st = k3_err(K3_ERR_NOMEM, "%s: out of memory", path);
    else if (b.n > TRANSCRIPT_MAX)
        st = k3_err(K3_ERR_FORMAT, "%s: larger than %u bytes, not a transcript", path, TRANSCRIPT_MAX);
    else if (b.n == bom)
        st = k3_err(K3_ERR_FORMAT, "%s:1: empty file, expected a k3chat transcript header", path);
    if (st)
        goto done;
    lctx   L   = {path, 0};
    size_t pos = bom;
    while (pos < b.n) {
        L.line++;
        char  *nl  = memchr(b.p + pos, '\n', b.n - pos);
        size_t end = nl ? (size_t)(nl - b.p) : b.n, len = end - pos;
        if (len && b.p[pos + len - 1] == '\r')
            len--;
        int syntax;
        if (len == 0 && L.line > 1) {
            pos = end + 1;
            continue; /* blank lines between messages are allowed */
        }
        st = len ? parse_line(&L, b.p + pos, len, nc, info, &syntax)
                 : LERR(&L, "empty line, expected the transcript header");
        if (st && !nl && syntax && L.line > 1) {
            /* an interrupted append: keep everything before it, and say so */
            char        pre[64];
            const char *why = k3_errmsg(); /* "PATH:LINE: ...": the file is named once */
            int         np  = snprintf(pre, sizeof pre, ":%d: ", L.line);
            const char *at  = strstr(why, pre);
            snprintf(info->torn_why, sizeof info->torn_why, "%s", at && np > 0 ? at + np : why);
            info->torn_line = L.line;
            st              = K3_OK;
        }
        if (st)
            goto done;
        pos = end + 1;
    }
    info->n_messages = nc->n_msgs;
    /* the whole file is good: swap it in; the autosave continues in a new file */
    conv_swap_content(c, nc);
    for (int i = 0; i < c->n_msgs; i++) /* later turns get seeds of their own */
        c->n_turns_started += c->msgs[i].role == K3_ROLE_ASSISTANT;
    free(c->autosave_path);
    c->autosave_path = NULL;
    c->n_saved       = 0;
    c->rewrite       = 0;
done:
    k3_conv_free(nc);
    free(b.p);
    return st;
}

/* ==== Markdown export ======================================================= */

/* The user's and the system's text, literally: every ASCII punctuation character that can
 * start Markdown is backslash-escaped (CommonMark allows it before any of them), leading
 * spaces become &#32; (no indented code block), and a line break inside a paragraph is a
 * hard break ("\" at the end of the line). */
static void md_literal(sbuf *b, const char *s) {
    int bol = 1;
    for (; *s; s++) {
        if (*s == '\n') {
            sb_str(b, !bol && s[1] && s[1] != '\n' ? "\\\n" : "\n");
            bol = 1;
            continue;
        }
        if (bol && (*s == ' ' || *s == '\t')) {
            sb_str(b, "&#32;");
            continue;
        }
        bol = 0;
        if (strchr("\\`*_{}[]<>()#+-.!|~&=", *s))
            sb_add(b, "\\", 1);
        sb_add(b, s, 1);
    }
}

/* A code-fence line (``` or ~~~, three or more, indented at most 3 spaces): the marker's
 * length, 0 when the line is not one; *ch gets its character, *bare whether nothing but
 * blanks follows it (only such a line closes a fence). */
static size_t fence_len(const char *line, size_t len, char *ch, int *bare) {
    size_t i = 0, n = 0;
    while (i < 3 && i < len && line[i] == ' ')
        i++;
    if (i == len || (line[i] != '`' && line[i] != '~'))
        return 0;
    *ch = line[i];
    while (i + n < len && line[i + n] == *ch)
        n++;
    size_t k = i + n;
    while (k < len && (line[k] == ' ' || line[k] == '\t'))
        k++;
    *bare = k == len;
    return n >= 3 ? n : 0;
}

/* The model's Markdown, kept as Markdown but unable to swallow what follows it: a code fence
 * left open is closed, and <details>/</details> tags outside code become text (one in a
 * reasoning would close its block, or open one that never ends). */
static void md_block(sbuf *b, const char *s) {
    char   open_ch = 0, ch = 0;
    size_t open_n = 0;
    while (*s) {
        size_t len  = strcspn(s, "\n"), f;
        int    bare = 0, in_code = open_n > 0;
        if ((f = fence_len(s, len, &ch, &bare))) {
            if (!open_n)
                open_n = f, open_ch = ch;
            else if (ch == open_ch && f >= open_n && bare)
                open_n = 0;
        }
        for (size_t i = 0; i < len; i++) {
            if (!in_code && s[i] == '<' &&
                (!strncasecmp(s + i + 1, "details", 7) || !strncasecmp(s + i + 1, "/details", 8)))
                sb_str(b, "&lt;");
            else
                sb_add(b, s + i, 1);
        }
        s += len;
        if (*s)
            sb_add(b, s++, 1);
    }
    if (open_n) { /* close the fence the text left open */
        sb_str(b, "\n");
        while (open_n--)
            sb_add(b, &open_ch, 1);
    }
}

static void md_stats(sbuf *b, const k3_msg *m) {
    if (m->interrupted)
        sb_str(b, "*(interrupted)*\n\n");
    if (!m->has_stats)
        return;
    const k3_turn_stats *t = &m->stats;
    k3_buf_printf(b, "<sub>%d tokens, %.1f tok/s, first token after %.2f s", t->n_gen, t->tok_s, t->ttft);
    if (t->n_think) /* from the first token to the end of the reasoning: the chat's "thought for X s" */
        k3_buf_printf(b, ", thought %.1f s", t->t_think > t->ttft ? t->t_think - t->ttft : 0);
    k3_buf_printf(b, ", prompt %d tokens (%d cached)</sub>\n\n", t->n_prompt, t->n_cached);
}

/* Text of one line (a tool's name, a call id, the model directory): a line break in it is
 * written \x0A (k3_escape's form), so it cannot end the heading or the line it stands in. */
static void md_line(sbuf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '\n' || *s == '\r')
            k3_buf_printf(b, "\\x%02X", (unsigned)*s);
        else
            sb_add(b, s, 1);
    }
}

/* The longest run of backticks in s, and n backticks: a code span's or fence's delimiter is
 * longer than any run inside it. */
static size_t most_backticks(const char *s) {
    size_t run = 0, most = 0;
    for (const char *p = s; *p; p++)
        most = (run = *p == '`' ? run + 1 : 0) > most ? run : most;
    return most;
}

static void backticks(sbuf *b, size_t n) {
    for (size_t k = 0; k < n; k++)
        sb_str(b, "`");
}

/* s (one line) in a code span whose backticks outnumber any run of them in s: whatever it holds
 * (*x*, [a](http://evil), <script>, backticks) shows as the characters it is. A space pads it
 * where it starts or ends with a backtick, or starts and ends with a space (a reader strips one
 * each side). */
static void md_code_span(sbuf *b, const char *s) {
    size_t most = most_backticks(s), n = strlen(s);
    int    pad = n && ((most && (s[0] == '`' || s[n - 1] == '`')) ||
                    (s[0] == ' ' && s[n - 1] == ' ' && strspn(s, " ") < n));
    backticks(b, most + 1);
    sb_str(b, pad ? " " : "");
    md_line(b, s);
    sb_str(b, pad ? " " : "");
    backticks(b, most + 1);
}

/* JSON (a call's arguments, a tool declaration) in a fenced block whose fence is longer than any
 * run of backticks in it (and at least three). */
static void md_json(sbuf *b, const char *s) {
    size_t most = most_backticks(s);
    backticks(b, (most > 2 ? most : 2) + 1);
    sb_str(b, "json\n");
    sb_str(b, s);
    sb_str(b, "\n");
    backticks(b, (most > 2 ? most : 2) + 1);
    sb_str(b, "\n\n");
}

/* One message of the Markdown export; note (or NULL) is added to its heading. */
static void md_msg(sbuf *bp, const k3_msg *m, const char *note) {
    static const char *const title[] = {"System", "User", "Assistant", "Tool result"};
    if (m->role == K3_ROLE_TOOL) {
        sb_str(bp, "## Tool result");
        if (m->tool_name) {
            sb_str(bp, ": ");
            md_code_span(bp, m->tool_name);
        }
        if (m->tool_call_id && *m->tool_call_id) {
            sb_str(bp, " (call ");
            md_code_span(bp, m->tool_call_id);
            sb_str(bp, ")");
        }
        sb_str(bp, "\n\n");
    } else
        k3_buf_printf(bp, "## %s%s\n\n", title[m->role], note ? note : "");
    if (m->reasoning && *m->reasoning) {
        sb_str(bp, "<details>\n<summary>Reasoning</summary>\n\n");
        md_block(bp, m->reasoning);
        sb_str(bp, "\n\n</details>\n\n");
    }
    if (*m->content) {
        if (m->role == K3_ROLE_ASSISTANT)
            md_block(bp, m->content);
        else
            md_literal(bp, m->content);
        sb_str(bp, "\n\n");
    }
    if (m->tools) {
        sb_str(bp, "**Tools declared here:**\n\n");
        md_json(bp, m->tools);
    }
    for (int k = 0; k < m->n_tool_calls; k++) {
        const k3_tool_call *tc = &m->tool_calls[k];
        sb_str(bp, "**Tool call** ");
        md_code_span(bp, tc->name);
        if (tc->id && *tc->id) {
            sb_str(bp, " (");
            md_code_span(bp, tc->id);
            sb_str(bp, ")");
        }
        sb_str(bp, ":\n\n");
        md_json(bp, tc->arguments && *tc->arguments ? tc->arguments : "{}");
    }
    md_stats(bp, m);
}

k3_status k3_conv_export_md(const k3_conv *c, const char *path) {
    sbuf                    b = {0};
    const k3_conv_settings *s = &c->set;
    sb_str(&b, "# k3chat conversation\n\n");
    k3_buf_printf(&b, "k3chat %s", k3_version());
    if (c->model_dir) {
        sb_str(&b, ", model ");
        md_code_span(&b, c->model_dir);
    }
    k3_buf_printf(&b, ", thinking %s (effort %s), temperature %g, top-p %g, seed %llu\n\n",
                  s->think ? "on" : "off", s->effort, (double)s->sampling.temp, (double)s->sampling.top_p,
                  (unsigned long long)s->sampling.seed);
    /* a system prompt set mid-conversation ("since") stands where it was set, not above the
     * answers that were given without it */
    int               sys = c->n_msgs && c->msgs[0].role == K3_ROLE_SYSTEM, late = sys && c->sys_since > 0;
    static const char note[] = " (set here; the answers above were given without it)";
    for (int i = 0; i < c->n_msgs; i++) {
        if (late && i == 0)
            continue;
        if (late && i - 1 == c->sys_since)
            md_msg(&b, &c->msgs[0], note);
        md_msg(&b, &c->msgs[i], NULL);
    }
    if (late && c->sys_since >= c->n_msgs - 1)
        md_msg(&b, &c->msgs[0], note);
    /* the file is read with cat and less too: every control character of the model's, a server's
     * or the user's text but \n and \t shows as k3_escape's \xHH or \uHHHH (an answer's OSC 52
     * must not write the clipboard of whoever reads the export); the transcript keeps the bytes */
    sbuf e = {.oom = b.oom};
    if (!b.oom)
        k3_escape(&e, NULL, b.p ? b.p : "", b.n); /* out of memory sets e.oom */
    k3_status st = write_text_file(path, &e, NULL);
    free(b.p);
    free(e.p);
    return st;
}
