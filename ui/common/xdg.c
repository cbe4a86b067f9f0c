/* xdg.c: XDG base directories (see xdg.h). */
#include "xdg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int xdg_dir(const char *var, const char *fallback, const char *sub, int create, char *out, size_t n) {
    const char *x = getenv(var), *h = getenv("HOME");
    int         k;
    if (x && *x)
        k = snprintf(out, n, "%s/k3chat%s%s", x, *sub ? "/" : "", sub);
    else if (h && *h)
        k = snprintf(out, n, "%s/%s/k3chat%s%s", h, fallback, *sub ? "/" : "", sub);
    else
        return -1;
    if (k < 0 || (size_t)k >= n)
        return -1;
    if (!create)
        return 0;
    for (char *p = out + 1; *p; p++)
        if (*p == '/') {
            struct stat st;
            *p      = 0;
            int bad = mkdir(out, 0700) != 0 && errno != EEXIST, e = errno;
            bad = bad && !(stat(out, &st) == 0 && S_ISDIR(st.st_mode));
            *p  = '/';
            if (bad) { /* the real cause (EROFS, EACCES, ENOTDIR), not the ENOENT further down */
                errno = e;
                return -1;
            }
        }
    return mkdir(out, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

const char *xdg_first_missing(const char *dir, char *buf, size_t n) {
    struct stat st;
    snprintf(buf, n, "%s", dir);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p)
            continue;
        char c = *p;
        *p     = 0;
        if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
            return buf;
        if (!c)
            return buf;
        *p = c;
    }
}
