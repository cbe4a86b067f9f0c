/* theme.c: role table, theme files and curses color pairs (see theme.h). */
#include "theme.h"
#include "k3.h"
#include "text.h"
#include "xdg.h"

#include <ctype.h>
#include <curses.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <term.h>
#include <unistd.h>

static const struct {
    const char *name;
    thm_spec    def;
} roles[THM_N] = {
#define X(id, name, fg, bg, at) {name, {fg, bg, at, 0, 0, 0, 0}},
    THEME_ROLES(X)
#undef X
};

static int cur_attr[THM_N];

const char *thm_role_name(enum thm_role r) {
    return r < THM_N ? roles[r].name : "?";
}

void thm_defaults(thm_spec t[THM_N]) {
    for (int r = 0; r < THM_N; r++)
        t[r] = roles[r].def;
}

static const char *ansi_names[] = {"black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"};

static int parse_color(const char *w, short *out) {
    if (!strcmp(w, "default")) {
        *out = -1;
        return 0;
    }
    int bright = !strncmp(w, "bright-", 7);
    for (int k = 0; k < 8; k++)
        if (!strcmp(w + (bright ? 7 : 0), ansi_names[k])) {
            *out = (short)(k + (bright ? 8 : 0));
            return 0;
        }
    char *end;
    long  v = strtol(w, &end, 10);
    if (end != w && !*end && v >= 0 && v <= 255) {
        *out = (short)v;
        return 0;
    }
    return -1;
}

static int parse_attr(const char *w) {
    static const char *names[] = {"bold", "dim", "italic", "underline", "reverse"};
    for (int k = 0; k < 5; k++)
        if (!strcmp(w, names[k]))
            return 1 << k;
    return 0;
}

int thm_parse(const char *text, const char *file, thm_spec t[THM_N], char *err, size_t errn) {
    int lineno = 0;
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        size_t      n   = eol ? (size_t)(eol - p) : strlen(p);
        char        line[512];
        lineno++;
        if (n >= sizeof line) {
            snprintf(err, errn, "%s:%d: line too long", file, lineno);
            return -1;
        }
        memcpy(line, p, n);
        line[n] = 0;
        p += n + (eol ? 1 : 0);
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char *words[8];
        int   nw = 0;
        for (char *tok = strtok(line, " \t\r="); tok && nw < 8; tok = strtok(NULL, " \t\r="))
            words[nw++] = tok;
        if (nw == 0)
            continue;
        int r;
        for (r = 0; r < THM_N; r++)
            if (!strcmp(words[0], roles[r].name))
                break;
        if (r == THM_N) {
            snprintf(err, errn, "%s:%d: unknown role '%s' (roles: normal, user, think, code, status, ...)",
                     file, lineno, words[0]);
            return -1;
        }
        if (nw < 3) {
            snprintf(err, errn, "%s:%d: %s: expected 'ROLE = FG BG [ATTRIBUTES]'", file, lineno, words[0]);
            return -1;
        }
        thm_spec s   = {0};
        int      bar = nw;
        for (int k = 1; k < nw; k++)
            if (!strcmp(words[k], "|")) {
                bar = k;
                break;
            }
        if (bar < nw && nw - bar - 1 < 2) {
            snprintf(err, errn, "%s:%d: %s: expected 'FG8 BG8 [ATTRIBUTES]' after '|'", file, lineno,
                     words[0]);
            return -1;
        }
        /* the 256-color part, then the 8-color part after '|' */
        for (int part = 0; part < 2 && (part == 0 || bar < nw); part++) {
            int    w0 = part ? bar + 1 : 1, w1 = part ? nw : bar, *at = part ? &s.attrs8 : &s.attrs;
            short *fg = part ? &s.fg8 : &s.fg, *bg = part ? &s.bg8 : &s.bg;
            if (w1 - w0 < 2) {
                snprintf(err, errn, "%s:%d: %s: expected 'ROLE = FG BG [ATTRIBUTES]'", file, lineno,
                         words[0]);
                return -1;
            }
            for (int k = w0; k < w0 + 2; k++)
                if (parse_color(words[k], k == w0 ? fg : bg)) {
                    snprintf(err, errn,
                             "%s:%d: %s: '%s' is not a color (a name, bright-NAME, default or 0..255)", file,
                             lineno, words[0], words[k]);
                    return -1;
                }
            for (int k = w0 + 2; k < w1; k++) {
                int a = parse_attr(words[k]);
                if (!a) {
                    snprintf(err, errn, "%s:%d: %s: '%s' is not bold, dim, italic, underline or reverse",
                             file, lineno, words[0], words[k]);
                    return -1;
                }
                *at |= a;
            }
            s.has8 = part;
        }
        t[r] = s;
    }
    return 0;
}

/* Directories searched for NAME.theme, most specific first. */
static int theme_dirs(char dirs[][PATH_MAX], int max) {
    int         n = 0;
    const char *d = k3_setting_env_str(K3_SETTING_THEME_DIR);
    if (d && n < max)
        snprintf(dirs[n++], PATH_MAX, "%s", d);
    if (n < max && xdg_dir("XDG_CONFIG_HOME", ".config", "themes", 0, dirs[n], PATH_MAX) == 0)
        n++;
    char    exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k]      = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            if (n < max)
                snprintf(dirs[n++], PATH_MAX, "%.*s/../themes", PATH_MAX - 16, exe);
            if (n < max)
                snprintf(dirs[n++], PATH_MAX, "%.*s/../share/k3chat/themes", PATH_MAX - 32, exe);
        }
    }
    return n;
}

int thm_load(const char *name, thm_spec t[THM_N], char *err, size_t errn) {
    char dirs[5][PATH_MAX];
    int  nd = theme_dirs(dirs, 5);
    thm_defaults(t);
    if (strchr(name, '/')) {
        snprintf(err, errn, "theme '%s': a theme name has no '/' (put NAME.theme in a themes directory)",
                 name);
        return -1;
    }
    if (strlen(name) > THM_NAME_MAX) {
        char q[48];
        snprintf(err, errn, "theme '%s': a theme name is at most %d bytes", txt_clip(q, sizeof q, name),
                 THM_NAME_MAX);
        return -1;
    }
    for (int k = 0; k < nd; k++) {
        char path[PATH_MAX + 80];
        snprintf(path, sizeof path, "%.4000s/%s.theme", dirs[k], name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        /* a theme is a few dozen short lines: one that does not fit, or cannot be read (a
         * directory named NAME.theme), is refused by name rather than parsed in part or as empty */
        char   buf[16384];
        size_t n    = fread(buf, 1, sizeof buf - 1, f);
        int    rerr = ferror(f) ? errno : 0, more = n == sizeof buf - 1 && fgetc(f) != EOF;
        fclose(f);
        if (rerr) {
            snprintf(err, errn, "%s: cannot read: %s", path, strerror(rerr));
            return -1;
        }
        if (more) {
            snprintf(err, errn, "%s: larger than %zu bytes, not a theme", path, sizeof buf - 1);
            return -1;
        }
        const char *nul = memchr(buf, 0, n);
        if (nul) { /* the parser would stop there and take what follows for nothing */
            snprintf(err, errn, "%s: a NUL byte (byte %zu), not a theme", path, (size_t)(nul - buf) + 1);
            return -1;
        }
        buf[n] = 0;
        return thm_parse(buf, path, t, err, errn);
    }
    if (!strcmp(name, "dark"))
        return 0; /* the built-in defaults are the dark theme */
    char        list[512], why[PATH_MAX + 64] = "";
    const char *d = k3_setting_env_str(K3_SETTING_THEME_DIR);
    struct stat sb;
    thm_list(list, sizeof list);
    int bad = d ? stat(d, &sb) : 0;
    if (d && (bad || !S_ISDIR(sb.st_mode))) /* a typo in it left no trace */
        snprintf(why, sizeof why, "; K3_THEME_DIR=%.4000s: %s", d, bad ? strerror(errno) : "not a directory");
    snprintf(err, errn, "no theme '%s' (themes: %s%s)", name, list, why);
    return -1;
}

void thm_list(char *buf, size_t n) {
    char   dirs[5][PATH_MAX];
    int    nd   = theme_dirs(dirs, 5);
    size_t used = 0;
    buf[0]      = 0;
    char seen[32][64];
    int  ns = 0;
    snprintf(seen[ns++], 64, "dark");
    for (int k = 0; k < nd; k++) {
        DIR *d = opendir(dirs[k]);
        if (!d)
            continue;
        for (struct dirent *e; (e = readdir(d));) {
            size_t l = strlen(e->d_name);
            if (l < 7 || l > 60 || strcmp(e->d_name + l - 6, ".theme"))
                continue;
            int dup = 0;
            for (int s = 0; s < ns; s++)
                dup |= !strncmp(seen[s], e->d_name, l - 6) && seen[s][l - 6] == 0;
            if (!dup && ns < 32)
                snprintf(seen[ns++], 64, "%.*s", (int)(l - 6), e->d_name);
        }
        closedir(d);
    }
    /* sorted, for a stable message */
    for (int a = 0; a < ns; a++)
        for (int b = a + 1; b < ns; b++)
            if (strcmp(seen[a], seen[b]) > 0) {
                char tmp[64];
                memcpy(tmp, seen[a], 64);
                memcpy(seen[a], seen[b], 64);
                memcpy(seen[b], tmp, 64);
            }
    for (int s = 0; s < ns && used + 70 < n; s++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", s ? ", " : "", seen[s]);
}

/* A 256-color index as RGB (xterm palette); 1 when it is a grey. */
static int rgb256(short c, int *r, int *g, int *b) {
    static const unsigned char base[16][3] = {{0, 0, 0},       {205, 0, 0},   {0, 205, 0},   {205, 205, 0},
                                              {0, 0, 238},     {205, 0, 205}, {0, 205, 205}, {229, 229, 229},
                                              {127, 127, 127}, {255, 0, 0},   {0, 255, 0},   {255, 255, 0},
                                              {92, 92, 255},   {255, 0, 255}, {0, 255, 255}, {255, 255, 255}};
    if (c < 16) {
        *r = base[c][0], *g = base[c][1], *b = base[c][2];
    } else if (c >= 232) {
        *r = *g = *b = 8 + (c - 232) * 10;
    } else {
        int k = c - 16;
        *r    = k / 36 ? 55 + 40 * (k / 36) : 0;
        *g    = (k / 6) % 6 ? 55 + 40 * ((k / 6) % 6) : 0;
        *b    = k % 6 ? 55 + 40 * (k % 6) : 0;
    }
    return *r == *g && *g == *b;
}

/* The nearest of the six hues (red .. magenta: never black or white) to a non-grey color, by
 * its hue angle: sector round(h / 60). */
static short hue8(int r, int g, int b) {
    static const short sector[6] = {1, 3, 2, 6, 4, 5}; /* red yellow green cyan blue magenta */
    int    mx = r > g ? (r > b ? r : b) : (g > b ? g : b), mn = r < g ? (r < b ? r : b) : (g < b ? g : b);
    double h, d                                               = mx - mn > 0 ? mx - mn : 1;
    if (mx == r)
        h = 60 * ((g - b) / d);
    else if (mx == g)
        h = 60 * ((b - r) / d) + 120;
    else
        h = 60 * ((r - g) / d) + 240;
    if (h < 0)
        h += 360;
    return sector[(int)((h + 30) / 60) % 6];
}

void thm_resolve(const thm_spec *s, int colors, short *fg, short *bg, int *attrs) {
    *fg = s->fg, *bg = s->bg, *attrs = s->attrs;
    if (colors >= 256)
        return;
    if (s->has8) {
        *fg = s->fg8, *bg = s->bg8, *attrs = s->attrs8;
    } else {
        int r, g, b;
        if (*bg >= 16 && rgb256(*bg, &r, &g, &b)) { /* a grey bar: reverse video */
            *bg = -1;
            *attrs |= THM_A_REVERSE;
        } else if (*bg >= 16) {
            *bg = hue8(r, g, b);
        }
        if (*fg >= 16 && rgb256(*fg, &r, &g, &b)) {
            *fg = -1;
            if (!(*attrs & THM_A_REVERSE))
                *attrs |= THM_A_DIM;
        } else if (*fg >= 16) {
            *fg = hue8(r, g, b);
        }
    }
    if (colors < 16) {
        if (*fg >= 8)
            *fg = (short)(*fg - 8);
        if (*bg >= 8)
            *bg = (short)(*bg - 8);
    }
    if (*fg >= 0 && *fg == *bg)
        *fg = -1;
}

int thm_direct(short c, int n_idx) {
    int r, g, b;
    if (c < 0 || c < n_idx || c > 255)
        return c;
    rgb256(c, &r, &g, &b);
    return r << 16 | g << 8 | b;
}

void thm_apply(const thm_spec t[THM_N]) {
    const char *nc  = getenv("NO_COLOR");
    int         col = has_colors() && !(nc && *nc);
    if (col) {
        start_color();
        use_default_colors();
    }
    /* a direct-color terminal (COLORS 2^24: xterm-direct) takes a color number as its RGB value
     * but for the first CO (terminfo, 8 when not given) indexes: 256-color 252 was drawn as
     * RGB 0,0,252 (the grey status bar blue, its bright blue title black on it) */
    int direct = col && COLORS > 256, n_idx = direct ? tigetnum("CO") : 0;
    if (direct && n_idx < 0)
        n_idx = 8;
    for (int r = 0; r < THM_N; r++) {
        short fg, bg;
        int   at, a = 0;
        thm_resolve(&t[r], col ? COLORS : 256, &fg, &bg, &at);
        if (!col)
            at = t[r].attrs;
        if (at & THM_A_BOLD)
            a |= (int)A_BOLD;
        if (at & THM_A_DIM)
            a |= (int)A_DIM;
        if (at & THM_A_ITALIC)
            a |= (int)A_ITALIC;
        if (at & THM_A_UNDERLINE)
            a |= (int)A_UNDERLINE;
        if (at & THM_A_REVERSE)
            a |= (int)A_REVERSE;
        if (col && r + 1 < COLOR_PAIRS) {
            if (direct)
                init_extended_pair(r + 1, thm_direct(fg, n_idx), thm_direct(bg, n_idx));
            else
                init_pair((short)(r + 1), fg, bg);
            a |= (int)COLOR_PAIR(r + 1);
        } else if (!col && r == THM_STATUS) {
            a |= (int)A_REVERSE; /* the status bar stays visible without colors */
        }
        cur_attr[r] = a;
    }
}

int thm_attr(enum thm_role r) {
    return r < THM_N ? cur_attr[r] : 0;
}
