/* test-util.c: error messages, float conversions. */
#include "k3-impl.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    k3_status st = k3_err(K3_ERR_FORMAT, "%s: tensor '%s' is bad", "x.safetensors", "w");
    T_CHECK(st == K3_ERR_FORMAT, "k3_err returns its status");
    T_CHECK(!strcmp(k3_errmsg(), "x.safetensors: tensor 'w' is bad"), "message recorded (%s)", k3_errmsg());
    k3_err_prefix("loading %s", "dir");
    T_CHECK(!strcmp(k3_errmsg(), "loading dir: x.safetensors: tensor 'w' is bad"), "prefix (%s)",
            k3_errmsg());
    T_CHECK(k3_bf16_to_f32(0x3f80) == 1.0f, "bf16 1.0");
    T_CHECK(k3_bf16_to_f32(k3_f32_to_bf16(-2.5f)) == -2.5f, "bf16 round trip -2.5");
    T_CHECK(k3_f32_to_bf16(1.00390625f) == 0x3f80, "bf16 ties to even (down)");
    T_CHECK(k3_f32_to_bf16(1.01171875f) == 0x3f82, "bf16 ties to even (up)");
    T_CHECK(k3_f16_to_f32(0x3c00) == 1.0f, "f16 1.0");
    T_CHECK(k3_f16_to_f32(0x0001) == 0x1p-24f, "f16 smallest subnormal");
    T_CHECK(k3_f16_to_f32(0xc500) == -5.0f, "f16 -5");
    T_CHECK(isinf(k3_f16_to_f32(0x7c00)), "f16 inf");
    /* the growable buffer (k3_buf): appends, growth, NUL termination, a refused size */
    k3_buf b  = {0};
    int    ok = 1;
    for (int i = 0; i < 1000; i++)
        ok &= k3_buf_add(&b, "abc", 3) == 0;
    T_CHECK(ok && b.n == 3000 && b.cap > 3000 && b.p[2999] == 'c' && b.p[3000] == 0 &&
                !strncmp(b.p, "abcabc", 6),
            "k3_buf_add: 1000 appends of 3 bytes, grown and NUL-terminated (n %zu)", b.n);
    T_CHECK(k3_buf_add(&b, "x", SIZE_MAX / 2) == -1 && b.oom && b.n == 3000 && b.p[3000] == 0,
            "k3_buf_add: an impossible size fails, sets oom and leaves the buffer as it was");
    T_CHECK(k3_buf_add(&b, "", 0) == 0 && b.n == 3000, "k3_buf_add: an empty append is fine");
    free(b.p);
    return t_done();
}
