/* theme.h: colors by role (style.md point 14).
 *
 * THEME_ROLES is the one table of roles: drawing code asks for thm_attr(THM_USER) and never uses
 * a raw color. A theme file (themes/NAME.theme, or NAME.theme in $XDG_CONFIG_HOME/k3chat/themes)
 * overrides roles by name, one per line:
 *     # comment
 *     user      = cyan default bold
 *     think     = 245 default dim
 * FG and BG are default, black, red, green, yellow, blue, magenta, cyan, white, bright-NAME, or
 * a 256-color number; attributes are bold, dim, italic, underline, reverse. A role may add
 * its choice for 8- and 16-color terminals after a '|':
 *     border    = 240 default | default default dim
 * (otherwise thm_resolve derives one); with NO_COLOR set (or a monochrome terminal) only the
 * attributes are used.
 */
#pragma once
#include <stddef.h>

/*        role            name             fg  bg  attributes (THM_A_*) */
#define THEME_ROLES(X)                                                                                       \
    X(THM_NORMAL, "normal", -1, -1, 0)                                                                       \
    X(THM_USER, "user", 6, -1, THM_A_BOLD)                                                                   \
    X(THM_ASSISTANT, "assistant", -1, -1, 0)                                                                 \
    X(THM_THINK, "think", 245, -1, THM_A_DIM)                                                                \
    X(THM_THINK_SUMMARY, "think-summary", 244, -1, THM_A_DIM)                                                \
    X(THM_CODE, "code", 150, -1, 0)                                                                          \
    X(THM_SYSTEM, "system", 5, -1, 0)                                                                        \
    X(THM_TITLE, "title", 4, -1, THM_A_BOLD)                                                                 \
    X(THM_BORDER, "border", 240, -1, 0)                                                                      \
    X(THM_STATUS, "status", 252, 236, 0)                                                                     \
    X(THM_STATUS_KEY, "status-key", 12, 236, THM_A_BOLD)                                                     \
    X(THM_PROMPT, "prompt", 6, -1, THM_A_BOLD)                                                               \
    X(THM_INPUT, "input", -1, -1, 0)                                                                         \
    X(THM_INFO, "info", 3, -1, 0)                                                                            \
    X(THM_ERROR, "error", 9, -1, THM_A_BOLD)                                                                 \
    X(THM_PROGRESS, "progress", 2, -1, 0)                                                                    \
    X(THM_MD_HEADING, "md-heading", 75, -1, THM_A_BOLD)                                                      \
    X(THM_MD_STRONG, "md-strong", -1, -1, THM_A_BOLD)                                                        \
    X(THM_MD_EM, "md-em", -1, -1, THM_A_ITALIC)                                                              \
    X(THM_MD_CODE, "md-code", 150, -1, 0)                                                                    \
    X(THM_MD_MATH, "md-math", 150, -1, 0)                                                                    \
    X(THM_MD_STRIKE, "md-strike", 244, -1, THM_A_DIM)                                                        \
    X(THM_MD_LINK, "md-link", 39, -1, THM_A_UNDERLINE)                                                       \
    X(THM_MD_URL, "md-url", 244, -1, 0)                                                                      \
    X(THM_MD_QUOTE, "md-quote", 244, -1, 0)                                                                  \
    X(THM_MD_LIST, "md-list", 3, -1, 0)                                                                      \
    X(THM_MD_BORDER, "md-border", 240, -1, 0)                                                                \
    X(THM_MD_LANG, "md-lang", 244, -1, THM_A_ITALIC)                                                         \
    X(THM_MD_TABLE_HEAD, "md-table-head", -1, -1, THM_A_BOLD)

enum { THM_A_BOLD = 1, THM_A_DIM = 2, THM_A_ITALIC = 4, THM_A_UNDERLINE = 8, THM_A_REVERSE = 16 };

enum thm_role {
#define X(id, name, fg, bg, at) id,
    THEME_ROLES(X)
#undef X
        THM_N
};

typedef struct thm_spec {
    short fg, bg; /* -1 = terminal default, 0..255 */
    int   attrs;  /* THM_A_* */
    /* the choice for terminals with fewer than 256 colors ("... | FG8 BG8 [ATTRS]" in a
     * theme file); has8 = 0: derived by thm_resolve's rules */
    short fg8, bg8;
    int   attrs8, has8;
} thm_spec;

/* Parse theme text into t (which holds the defaults to override). 0 ok; -1 with
 * "FILE:LINE: what" in err. */
int  thm_parse(const char *text, const char *file, thm_spec t[THM_N], char *err, size_t errn);
void thm_defaults(thm_spec t[THM_N]);
/* The longest theme name, in bytes (the file is NAME.theme). */
#define THM_NAME_MAX 63
/* Find and parse theme NAME ("dark" also works without a file). 0 ok; -1 with err (a name with a
 * '/' or longer than THM_NAME_MAX is refused, not cut: a cut name could open another theme). */
int thm_load(const char *name, thm_spec t[THM_N], char *err, size_t errn);
/* Space-separated names of the themes found (builtin + files). */
void thm_list(char *buf, size_t n);

/* What role spec s becomes on a terminal with `colors` colors (8, 16, 256 or more): fg, bg
 * and THM_A_* attributes. Below 256 colors a theme's own 8-color choice is used, else one is
 * derived deliberately, never by the nearest RGB (which made grey borders black and grey
 * reasoning yellow): a grey (232..255 or r = g = b in the 6x6x6 cube) foreground becomes the
 * terminal's default color, dimmed; a grey background becomes reverse video on the default
 * colors; other cube colors go to the nearest of the six hues (never black or white); bright
 * colors 8..15 lose their brightness below 16 colors; a foreground equal to its background
 * becomes the default. */
void thm_resolve(const thm_spec *s, int colors, short *fg, short *bg, int *attrs);
/* A resolved color c on a direct-color terminal (COLORS 2^24), whose color numbers are RGB values
 * (0xRRGGBB) past its first n_idx indexed colors (terminfo CO): c itself when it is the default
 * (-1) or below n_idx, else the xterm palette's RGB of 256-color c. */
int thm_direct(short c, int n_idx);

/* curses side: make t current (after initscr); attributes for drawing. */
void        thm_apply(const thm_spec t[THM_N]);
int         thm_attr(enum thm_role r); /* an attr_t with COLOR_PAIR, as int */
const char *thm_role_name(enum thm_role r);
