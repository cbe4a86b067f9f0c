/* clip.h: /copy, shared by the TUI and line mode: which text (an answer, or one of its code
 * blocks), and putting it on the clipboard with OSC 52 (through tmux and screen). */
#pragma once
#include "text.h"

#include <stddef.h>

typedef struct clip_req {
    int answer; /* 1-based answer number, 0 = the last one          */
    int code;   /* 1-based code block of that answer, 0 = all of it */
} clip_req;

/* Parse the argument of /copy: "", "N", "code", "code K", "N code", "N code K".
 * 0 ok; -1 with a message naming the bad word in err. */
int clip_parse(const char *arg, clip_req *q, char *err, size_t errn);
/* The text q asks for among n answers (oldest first) into out. 0 ok; -1 with err (no such
 * answer, no such code block). */
int clip_select(const clip_req *q, const char *const *answers, const size_t *lens, int n, txt_buf *out,
                char *err, size_t errn);
/* Send s[0..n) to the terminal on fd as OSC 52. 0 ok with a message for the user in msg
 * (characters copied; the /export hint); -1 when nothing was sent, msg says why. */
int clip_send(int fd, const char *s, size_t n, char *msg, size_t msgn);
