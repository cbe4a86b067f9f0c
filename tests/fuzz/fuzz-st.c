/* fuzz-st.c: a safetensors file (header and data) as model.safetensors: st_open must validate
 * or reject it with a message, never crash; every tensor it accepts must be readable. */
#include "fuzz.h"
#include "st.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_write("model.safetensors", data, size);
    st_dir *d;
    if (st_open(fz_scratch(), &d) != K3_OK) {
        FZ_CHECK(k3_errmsg()[0] != 0);
        return 0;
    }
    for (int i = 0; i < st_n_tensors(d); i++) {
        const st_tensor *t = st_tensor_at(d, i);
        if (t->nbytes > (1u << 20))
            continue;
        void *buf = malloc(t->nbytes ? t->nbytes : 1);
        FZ_CHECK(st_read(d, t, buf) == K3_OK);
        free(buf);
    }
    st_close(d);
    return 0;
}
