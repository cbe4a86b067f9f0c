/* chatfile.c: FILE arguments of /save and /export and the rule for replacing a file (chatfile.h). */
#include "chatfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int chat_file_arg(const char *cmd, const char *arg, char *buf, size_t n, int *force, char *msg, size_t mn) {
    if (force)
        *force = 0;
    if (force && !strncmp(arg, "--force", 7) && (arg[7] == ' ' || !arg[7])) {
        *force = 1;
        arg += 7;
        while (*arg == ' ')
            arg++;
    }
    if (!strncmp(arg, "--", 2)) { /* "--forse x", "--force --force x": a mistyped option, not a name */
        size_t w = strcspn(arg, " ");
        snprintf(msg, mn, "%s: unknown option '%.*s'%s; name a file that starts with -- as ./--NAME", cmd,
                 (int)(w < 64 ? w : 64), arg, force ? " (the one option is --force, once)" : "");
        return -1;
    }
    size_t len = strlen(arg);
    if (len >= 2 && (arg[0] == '"' || arg[0] == '\'') && arg[len - 1] == arg[0]) {
        arg++; /* "my chat.jsonl": the quotes are the shell's habit, not part of the name */
        len -= 2;
    }
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)arg[i] < 0x20 || arg[i] == 0x7f) {
            snprintf(msg, mn,
                     "%s: the file name has a control character (byte %zu is 0x%02X); a name is one line",
                     cmd, i + 1, (unsigned char)arg[i]);
            return -1;
        }
    if (!len) {
        snprintf(msg, mn, "%s: no file name given", cmd);
        return -1;
    }
    const char *home  = getenv("HOME");
    int         tilde = arg[0] == '~' && (len == 1 || arg[1] == '/') && home && *home;
    int         k     = tilde ? snprintf(buf, n, "%s%.*s", home, (int)len - 1, arg + 1)
                              : snprintf(buf, n, "%.*s", (int)len, arg);
    if (k < 0 || (size_t)k >= n) {
        snprintf(msg, mn, "%s: the file name is longer than %zu bytes", cmd, n - 1);
        return -1;
    }
    return 0;
}

/* Whether the file open on fd starts as k3chat writes that kind: a transcript's header line
 * {"format":"k3chat-transcript", ...} (k3chat(5)), an export's "# k3chat conversation". */
static int is_ours(int fd, int kind) {
    static const char *const head[] = {"{\"format\":\"k3chat-transcript\"", "# k3chat conversation\n"};
    char                     b[64];
    size_t                   want = strlen(head[kind]), got = 0;
    while (got < want) {
        ssize_t r = read(fd, b + got, want - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return got == want && !memcmp(b, head[kind], want);
}

int chat_file_may_replace(const char *cmd, const char *path, int kind, int force, char *msg, size_t mn) {
    static const char *const what[] = {"a k3chat transcript", "a k3chat export"};
    static const char *const ext[]  = {"jsonl", "md"};
    struct stat              sb;
    if (lstat(path, &sb) != 0)
        return 0; /* nothing there (or the write will say what is wrong) */
    /* a directory, --force or not: the message used to offer --force, whose rename then failed */
    if (S_ISDIR(sb.st_mode)) {
        size_t n = strlen(path);
        snprintf(msg, mn,
                 "%s: %.3000s is a directory; nothing was written (name a file in it: %s %.3000s%sNAME.%s)",
                 cmd, path, cmd, path, n && path[n - 1] == '/' ? "" : "/", ext[kind]);
        return -1;
    }
    /* a device, --force or not: the save's rename would put a regular file in place of the node
     * (as root, /dev/full or /dev/null itself), and writing into it cannot make a transcript */
    if (S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode)) {
        snprintf(msg, mn,
                 "%s: %.3000s is a device; nothing was written, --force or not (the file would replace the "
                 "device node; name a regular file)",
                 cmd, path);
        return -1;
    }
    if (force)
        return 0;
    const char *why = NULL;
    if (S_ISLNK(sb.st_mode))
        why = "is a symbolic link (the file would replace the link)";
    else if (!S_ISREG(sb.st_mode))
        why = "exists and is not a regular file";
    else if (sb.st_size > 0) {
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            why = "exists and cannot be read to see whether k3chat wrote it";
        else if (!is_ours(fd, kind))
            why = kind == CHAT_FILE_TRANSCRIPT ? "exists and is not a k3chat transcript"
                                               : "exists and is not a k3chat export";
        if (fd >= 0)
            close(fd);
    }
    if (!why)
        return 0;
    snprintf(msg, mn,
             "%s: %.3000s %s; nothing was written (%s --force %.3000s replaces it; only %s is replaced "
             "without asking)",
             cmd, path, why, cmd, path, what[kind]);
    return -1;
}
