/* test-ui-cmd.c: slash-command parsing (ui/common/cmd.c): every command, bad arguments with their
 * messages, nearest-command suggestions and completion; theme file parsing (ui/common/theme.c). */
#include "clip.h"
#include "cmd.h"
#include "test.h"
#include "theme.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cmd_result r;

static int ok(const char *line, enum cmd_id id) {
    return cmd_parse(line, &r) == 0 && r.id == id;
}
static int bad(const char *line, const char *msg_part) {
    return cmd_parse(line, &r) != 0 && strstr(r.msg, msg_part) != NULL;
}

int main(void) {
    T_CHECK(ok("/help", CMD_HELP), "/help");
    T_CHECK(ok("/help temp", CMD_HELP) && r.flag == CMD_TEMP, "/help temp names /temp");
    T_CHECK(ok("/help /effort", CMD_HELP) && r.flag == CMD_EFFORT, "/help /effort");
    T_CHECK(bad("/help tmep", "did you mean /temp"), "/help tmep suggests /temp: %s", r.msg);
    T_CHECK(ok("/temp 0.7", CMD_TEMP) && r.num > 0.69 && r.num < 0.71, "/temp 0.7");
    T_CHECK(ok("  /temp 0  ", CMD_TEMP) && r.num == 0, "/temp 0 with spaces around");
    T_CHECK(bad("/temp", "missing the value"), "/temp without value: %s", r.msg);
    T_CHECK(bad("/temp abc", "'abc' is not a number in 0..2"), "/temp abc: %s", r.msg);
    T_CHECK(bad("/temp 2.5", "not a number in 0..2"), "/temp 2.5 out of range");
    T_CHECK(bad("/temp nan", "not a number"), "/temp nan");
    T_CHECK(bad("/temp 1x", "not a number"), "/temp 1x");
    T_CHECK(ok("/top-p 0.9", CMD_TOPP), "/top-p 0.9");
    T_CHECK(bad("/top-p -0.1", "0..1"), "/top-p -0.1");
    T_CHECK(ok("/think on", CMD_THINK) && r.flag == 1, "/think on");
    T_CHECK(ok("/think off", CMD_THINK) && r.flag == 0, "/think off");
    T_CHECK(bad("/think yes", "'yes' is not on or off"), "/think yes: %s", r.msg);
    T_CHECK(bad("/think", "missing the value (on or off)"), "/think: %s", r.msg);
    T_CHECK(ok("/effort low", CMD_EFFORT) && r.flag == 0, "/effort low");
    T_CHECK(ok("/effort max", CMD_EFFORT) && r.flag == 2, "/effort max");
    T_CHECK(bad("/effort medium", "rejects medium"), "/effort medium: %s", r.msg);
    T_CHECK(ok("/show-thinking off", CMD_SHOWTHINK) && r.flag == 0, "/show-thinking off");
    T_CHECK(ok("/experts 12.5", CMD_EXPERTS) && r.num == 12.5, "/experts 12.5");
    T_CHECK(bad("/experts -1", "not a number"), "/experts -1");
    T_CHECK(ok("/system Be brief.  Very brief.", CMD_SYSTEM) && !strcmp(r.arg, "Be brief.  Very brief."),
            "/system keeps the text (got '%s')", r.arg);
    T_CHECK(ok("/system", CMD_SYSTEM) && r.arg[0] == 0, "/system without text");
    T_CHECK(ok("/clear", CMD_CLEAR) && ok("/retry", CMD_RETRY) && ok("/undo", CMD_UNDO) &&
                ok("/stats", CMD_STATS) && ok("/quit", CMD_QUIT) && ok("/forget", CMD_FORGET),
            "/clear /retry /undo /stats /quit /forget");
    T_CHECK(bad("/clear all", "takes no argument"), "/clear all: %s", r.msg);
    /* a long argument quoted in the message is cut between characters, with an ellipsis: at 60
     * bytes, "a" and 40 three-byte characters were cut inside the 20th (U+FFFD on the screen) */
    T_CHECK(bad("/clear a模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模",
                "(got 'a模模模模模模模模模模模模模模模模模模模…')") &&
                k3_utf8_repair(r.msg, strlen(r.msg), NULL, NULL) == 0,
            "/clear with a long argument: the quote ends on a whole character, with … (%s)", r.msg);
    T_CHECK(bad("/help a模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模模",
                "no command /a模模模模模模模模模模模模模模模模模模模…") &&
                k3_utf8_repair(r.msg, strlen(r.msg), NULL, NULL) == 0,
            "/help of a long name: the same (%s)", r.msg);
    clip_req cq;
    char     cm[256];
    T_CHECK(clip_parse("模模模模模模模模模模模模模模模模模模模", &cq, cm, sizeof cm) != 0 &&
                strstr(cm, "'模模模模模模模模模模模模模…' is not an answer number") &&
                k3_utf8_repair(cm, strlen(cm), NULL, NULL) == 0,
            "/copy with a long word: the quote ends on a whole character, with … (%s)", cm);
    T_CHECK(ok("/save", CMD_SAVE) && r.arg[0] == 0, "/save without a file");
    T_CHECK(ok("/save my chat.jsonl", CMD_SAVE) && !strcmp(r.arg, "my chat.jsonl"),
            "/save with a space in the name");
    T_CHECK(ok("/load a.jsonl", CMD_LOAD) && bad("/load", "missing the file name"), "/load FILE and /load");
    T_CHECK(ok("/replay a.jsonl", CMD_REPLAY) && bad("/replay", "missing the file name"), "/replay");
    T_CHECK(ok("/export a.md", CMD_EXPORT), "/export");
    T_CHECK(ok("/theme light", CMD_THEME) && ok("/theme", CMD_THEME), "/theme NAME and /theme");
    T_CHECK(bad("/theme a b", "expected one word"), "/theme a b");
    T_CHECK(bad("/tmep 1", "unknown command /tmep; did you mean /temp?"), "/tmep: %s", r.msg);
    T_CHECK(bad("/qiut", "did you mean /quit?"), "/qiut: %s", r.msg);
    T_CHECK(bad("/sav", "did you mean /save?"), "/sav (a prefix): %s", r.msg);
    T_CHECK(bad("/showthinking on", "did you mean /show-thinking?"), "/showthinking: %s", r.msg);
    T_CHECK(bad("/frobnicate", "unknown command /frobnicate (/help"), "far from everything: %s", r.msg);
    T_CHECK(bad("hello", "not a command"), "text without / is not a command");
    char big[5000];
    memset(big, 'x', sizeof big);
    memcpy(big, "/system ", 8);
    big[sizeof big - 1] = 0;
    T_CHECK(bad(big, "too long"), "an over-long argument is refused");

    const char *c[32];
    int         n = cmd_complete("s", c, 32);
    T_CHECK(n == 4, "completion of 's': 4 commands (got %d)", n);
    n = cmd_complete("f", c, 32);
    T_CHECK(n == 1 && !strcmp(c[0], "forget"), "completion of 'f': forget");
    n = cmd_complete("th", c, 32);
    T_CHECK(n == 2, "completion of 'th': think, theme (got %d)", n);
    n = cmd_complete("", c, 32);
    T_CHECK(n == CMD_N, "completion of '': every command (%d)", n);
    char u[64];
    T_CHECK(!strcmp(cmd_usage(CMD_TEMP, u, sizeof u), "/temp X"), "usage of /temp");
    int no_help = 0;
    for (int k = 0; k < CMD_N; k++)
        if (!cmd_help((enum cmd_id)k)[0]) {
            printf("  /%s has no help text\n", cmd_name((enum cmd_id)k));
            no_help++;
        }
    T_CHECK(no_help == 0, "every command has help text (%d without)", no_help);
    /* a number's range goes inside the doc's own parenthesis: /experts read "... (unset: from the
     * memory available) (0..1000000)" */
    int two_paren = 0;
    for (int k = 0; k < CMD_N; k++)
        if (strstr(cmd_help((enum cmd_id)k), ") (")) {
            printf("  /%s: %s\n", cmd_name((enum cmd_id)k), cmd_help((enum cmd_id)k));
            two_paren++;
        }
    T_CHECK(two_paren == 0, "no command's help ends in two parentheses (%d do)", two_paren);
    T_CHECK(!strcmp(cmd_help(CMD_EXPERTS),
                    "routed-expert cache budget in GB (unset: from the memory available; "
                    "0..1000000)"),
            "/experts's help: %s", cmd_help(CMD_EXPERTS));

    /* theme files */
    thm_spec t[THM_N];
    char     err[256];
    thm_defaults(t);
    /* a theme name past THM_NAME_MAX is refused, not cut: "%.64s.theme" opened the theme named by
     * its first 64 bytes (here the "a...a" theme of a test directory for "a...aEVIL") */
    char dir[600], name[80], tpath[800];
    snprintf(dir, sizeof dir, "%s/themes", t_tmp());
    memset(name, 'a', 64);
    name[64] = 0;
    snprintf(tpath, sizeof tpath, "%s/%s.theme", dir, name);
    T_CHECK(t_sh("mkdir -p '%s' && printf 'user = red blue\\n' > '%s'", dir, tpath) == 0,
            "a theme named a...a");
    setenv("K3_THEME_DIR", dir, 1);
    snprintf(name + 64, sizeof name - 64, "EVIL");
    T_CHECK(thm_load(name, t, err, sizeof err) != 0 && strstr(err, "at most 63 bytes") &&
                strstr(err, "aaa…'"),
            "a 68-byte theme name is refused, not read as its first 64 bytes (%s)", err);
    name[63] = 0;
    T_CHECK(thm_load(name, t, err, sizeof err) != 0 && !strstr(err, "at most"),
            "a 63-byte name is looked up whole (%s)", err);
    /* a K3_THEME_DIR that is no directory is named where the theme is not found (it left no trace) */
    char missing[700], e2[2048];
    snprintf(missing, sizeof missing, "%s/none", dir);
    setenv("K3_THEME_DIR", missing, 1);
    T_CHECK(thm_load("nosuch", t, e2, sizeof e2) != 0 && strstr(e2, "no theme 'nosuch'") &&
                strstr(e2, "; K3_THEME_DIR=") && strstr(e2, "/none: No such file or directory)"),
            "K3_THEME_DIR naming no directory: said with the unknown theme (%s)", e2);
    setenv("K3_THEME_DIR", tpath, 1);
    T_CHECK(thm_load("nosuch", t, e2, sizeof e2) != 0 && strstr(e2, ".theme: not a directory)"),
            "K3_THEME_DIR naming a file: said with the unknown theme (%s)", e2);
    unsetenv("K3_THEME_DIR");
    thm_defaults(t);
    T_CHECK(thm_parse("# c\nuser = red default bold underline\n\nthink=245 0 dim\n", "x.theme", t, err,
                      sizeof err) == 0 &&
                t[THM_USER].fg == 1 && t[THM_USER].bg == -1 &&
                t[THM_USER].attrs == (THM_A_BOLD | THM_A_UNDERLINE) && t[THM_THINK].fg == 245 &&
                t[THM_THINK].bg == 0,
            "theme: names, numbers and attributes");
    T_CHECK(thm_parse("status = bright-white blue\n", "x.theme", t, err, sizeof err) == 0 &&
                t[THM_STATUS].fg == 15,
            "theme: bright-white is 15");
    T_CHECK(thm_parse("\nnosuch = red red\n", "x.theme", t, err, sizeof err) != 0 &&
                strstr(err, "x.theme:2: unknown role 'nosuch'"),
            "theme: unknown role names file and line: %s", err);
    T_CHECK(thm_parse("user = 300 default\n", "x.theme", t, err, sizeof err) != 0 &&
                strstr(err, "'300' is not a color"),
            "theme: color out of range: %s", err);
    T_CHECK(thm_parse("user = red\n", "x.theme", t, err, sizeof err) != 0 && strstr(err, "expected"),
            "theme: missing background: %s", err);
    T_CHECK(thm_parse("user = red blue blink\n", "x.theme", t, err, sizeof err) != 0 &&
                strstr(err, "'blink'"),
            "theme: unknown attribute: %s", err);
    /* issue 26 item 20, issue 35 item 1: one number parser (test-settings.c) and one range per
     * setting, the row of the settings table */
    double v = -1;
    char   e[256];
    T_CHECK(k3_setting_parse(cmd_setting(CMD_TEMP), K3_SRC_FLAG, "2", &v, e, sizeof e) == 0 && v == 2 &&
                k3_setting_parse(cmd_setting(CMD_TEMP), K3_SRC_FLAG, "2.01", &v, e, sizeof e) &&
                !strcmp(e, "--temp: '2.01' is not a number in 0..2"),
            "/temp's range is 0..2, what --temp uses too (%s)", e);
    cmd_result rr;
    T_CHECK(cmd_parse("/temp -0", &rr) && strstr(rr.msg, "/temp: '-0' is not a number in 0..2"),
            "/temp -0 is refused (%s)", rr.msg);
    T_CHECK(ok("/experts 5000", CMD_EXPERTS) && r.num == 5000 && bad("/experts 1000001", "0..1000000"),
            "/experts takes K3_EXPERT_GB's range 0..1000000 (%s)", r.msg);
    T_CHECK(ok("/raw on", CMD_RAW) && r.flag == 1 && bad("/raw 1", "'1' is not on or off"), "/raw on|off");
    T_CHECK(cmd_parse("/HELP", &rr) && strstr(rr.msg, "did you mean /help?"), "/HELP suggests /help (%s)",
            rr.msg);
    T_CHECK(cmd_parse("/forget --fit", &rr) == 0 && !strcmp(rr.arg, "--fit") && cmd_parse("/forget x", &rr),
            "/forget takes --fit and nothing else");

    /* 8-color terminals (issue 26 item 23): each role mapped deliberately */
    T_CHECK(thm_parse("border = 240 default | default default dim\n", "x.theme", t, err, sizeof err) == 0 &&
                t[THM_BORDER].has8 && t[THM_BORDER].fg8 == -1 && t[THM_BORDER].attrs8 == THM_A_DIM &&
                t[THM_BORDER].fg == 240,
            "theme: '|' gives the 8-color choice");
    T_CHECK(thm_parse("border = 240 default |\n", "x.theme", t, err, sizeof err) != 0 &&
                strstr(err, "after '|'"),
            "theme: an empty 8-color part is an error: %s", err);
    short    fg, bg;
    int      at;
    thm_spec grey = {240, -1, 0, 0, 0, 0, 0}, bar = {252, 236, 0, 0, 0, 0, 0}, hue = {150, -1, 0, 0, 0, 0, 0};
    thm_resolve(&grey, 8, &fg, &bg, &at);
    T_CHECK(fg == -1 && bg == -1 && at == THM_A_DIM,
            "8 colors: a grey text is the default color, dimmed (fg %d)", fg);
    thm_resolve(&bar, 8, &fg, &bg, &at);
    T_CHECK(fg == -1 && bg == -1 && at == THM_A_REVERSE,
            "8 colors: a grey bar is reverse video (fg %d bg %d)", fg, bg);
    thm_resolve(&hue, 8, &fg, &bg, &at);
    T_CHECK(fg == 2, "8 colors: light green 150 is green by its hue (got %d)", fg);
    thm_resolve(&hue, 256, &fg, &bg, &at);
    T_CHECK(fg == 150, "256 colors: unchanged (got %d)", fg);
    /* direct color (xterm-direct, CO#8): numbers past the indexes are RGB values */
    T_CHECK(thm_direct(-1, 8) == -1 && thm_direct(6, 8) == 6,
            "direct color: default and ANSI 6 stay indexes");
    T_CHECK(thm_direct(12, 8) == 0x5c5cff, "direct color: bright blue 12 is RGB 5c5cff (got %06x)",
            thm_direct(12, 8));
    T_CHECK(thm_direct(252, 8) == 0xd0d0d0 && thm_direct(150, 8) == 0xafd787,
            "direct color: grey 252 and cube 150 as the xterm palette's RGB (%06x %06x)", thm_direct(252, 8),
            thm_direct(150, 8));
    T_CHECK(thm_direct(12, 16) == 12, "direct color with 16 indexes (xterm-direct16): 12 stays an index");
    /* every shipped theme, and the built-in one, on 8 and 16 colors: no text in its background's
     * color, none black on a dark theme, none white or yellow on the light one */
    static const char *names[] = {"(built-in)", "dark", "light", "high-contrast"};
    for (int th = 0; th < 4; th++) {
        thm_defaults(t);
        if (th > 0) {
            char path[64], buf[8192];
            snprintf(path, sizeof path, "themes/%s.theme", names[th]);
            FILE  *f   = fopen(path, "r");
            size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
            if (f)
                fclose(f);
            buf[got] = 0;
            T_CHECK(got > 0 && thm_parse(buf, path, t, err, sizeof err) == 0, "%s parses", path);
        }
        for (int colors = 8; colors <= 16; colors += 8) {
            int bad = -1;
            for (int ro = 0; ro < THM_N && bad < 0; ro++) {
                thm_resolve(&t[ro], colors, &fg, &bg, &at);
                int on_default = bg < 0 && !(at & THM_A_REVERSE);
                if ((fg >= 0 && fg == bg) || (on_default && th != 2 && th != 3 && fg == 0) ||
                    (on_default && th == 2 && (fg == 7 || fg == 3)))
                    bad = ro;
            }
            T_CHECK(bad < 0, "theme %s on %d colors: every role readable (first bad: %s)", names[th], colors,
                    bad < 0 ? "none" : thm_role_name((enum thm_role)bad));
        }
    }
    return t_done();
}
