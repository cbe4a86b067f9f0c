/* fuzz-chatparse.c: the output channel parser on arbitrary token streams (pairs of bytes are
 * ids, biased towards the structural tokens), with tool calls parsed or not: never crashes, and
 * with think off and no structural token at all, every byte of text reaches the response
 * channel. */
#include "fuzz.h"
#include "k3.h"

static k3_tok *tk;
static int32_t nv;

static void setup(void) {
    char path[512], cmd[600];
    snprintf(path, sizeof path, "%s/vocab", fz_scratch());
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && : > '%s/tiktoken.model'", path, path);
    if (system(cmd))
        abort();
    snprintf(cmd, sizeof cmd, "%s/tiktoken.model", path);
    FILE             *f   = fopen(cmd, "w");
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int b = 0; b < 256; b++)
        fprintf(f, "%c%c== %d\n", A[b >> 2], A[(b & 3) << 4], b);
    /* tag names as whole tokens, as a trained vocabulary would have them */
    fprintf(f, "dGhpbms= 256\ncmVzcG9uc2U= 257\nbWVzc2FnZQ== 258\n"); /* think response message */
    fclose(f);
    /* the release's names for the reserved ids N+0..N+5 (N = 259 base tokens here) */
    snprintf(cmd, sizeof cmd, "%s/tokenizer_config.json", path);
    f = fopen(cmd, "w");
    fprintf(f, "{\"added_tokens_decoder\": {\"259\": {\"content\": \"[BOS]\", \"special\": true},"
               " \"260\": {\"content\": \"[EOS]\", \"special\": true},"
               " \"261\": {\"content\": \"<|end_of_msg|>\", \"special\": true},"
               " \"262\": {\"content\": \"<|open|>\", \"special\": true},"
               " \"263\": {\"content\": \"<|close|>\", \"special\": true},"
               " \"264\": {\"content\": \"<|sep|>\", \"special\": true}}}\n");
    fclose(f);
    if (k3_tok_load(path, NULL, &tk)) {
        fprintf(stderr, "fuzz-chatparse: vocabulary: %s\n", k3_errmsg());
        abort();
    }
    nv = k3_tok_n_vocab(tk);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tk)
        setup();
    static const char *names[] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
    k3_chat_parser    *p;
    FZ_CHECK(k3_chat_parser_new(tk, size && (data[0] & 1), &p) == K3_OK);
    k3_chat_parser_set_tools(p, size && (data[0] & 2)); /* tool-call blocks parsed too */
    size_t in_text = 0, out_text = 0;
    int    structural = 0;
    for (size_t i = 1; i + 1 < size; i += 2) {
        int32_t id = (int32_t)((data[i] | data[i + 1] << 8) % (uint32_t)nv);
        if (data[i + 1] >= 0xf0) /* every 16th pair: a structural token */
            id = k3_tok_special(tk, names[data[i] & 3]);
        if (k3_tok_is_special(tk, id))
            structural = 1;
        else
            in_text += id < 256 ? 1 : id == 256 ? 5 : id == 257 ? 8 : 7;
        k3_chat_out o;
        FZ_CHECK(k3_chat_parser_feed(p, id, &o) == K3_OK);
        out_text += o.think_len + o.response_len;
        if (o.end)
            break;
    }
    k3_chat_out o;
    k3_chat_parser_finish(p, &o);
    out_text += o.think_len + o.response_len;
    /* invalid UTF-8 comes out as U+FFFD (3 bytes for a 1-byte sequence), never shorter */
    if (!structural)
        FZ_CHECK(out_text >= in_text);
    k3_chat_parser_free(p);
    return 0;
}
