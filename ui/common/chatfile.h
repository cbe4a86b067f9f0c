/* chatfile.h: the files the chat writes when asked (/save, /export): the FILE argument, and
 * whether an existing file may be replaced.
 *
 * A FILE argument is one line of text: a control character in it (a newline typed with
 * Alt-Enter) is refused; one pair of matching quotes around it is removed ("my chat.jsonl"),
 * "~/" is $HOME/. "--force FILE" replaces what is there. Without --force, /save replaces only
 * an empty file or a k3chat transcript, and /export only an empty file or an earlier k3chat
 * export (a transcript is never replaced by an export); a symbolic link, another kind of file,
 * or a file that is not k3chat's is refused with a message naming it.
 */
#pragma once
#include <stddef.h>

enum { CHAT_FILE_TRANSCRIPT = 0, CHAT_FILE_EXPORT = 1 };

/* Parse cmd's FILE argument arg into buf (n bytes): 0 and the path (with force != NULL, "--force"
 * before the name sets *force = 1; without, it is part of the name);
 * -1 with msg ("CMD: ...") for an empty or multi-line argument or one too long. */
int chat_file_arg(const char *cmd, const char *arg, char *buf, size_t n, int *force, char *msg, size_t mn);

/* May cmd write path as a file of kind (CHAT_FILE_*)? 0: path does not exist, or is an empty
 * regular file or one k3chat wrote as that kind, or anything but a directory or a device with force
 * (--force); -1 with msg saying why not and that "cmd --force FILE" replaces it (a directory: that a
 * file in it must be named, and a device, --force or not). Errors of lstat other than ENOENT are left to the
 * write. */
int chat_file_may_replace(const char *cmd, const char *path, int kind, int force, char *msg, size_t mn);
