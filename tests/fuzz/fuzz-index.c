/* fuzz-index.c: model.safetensors.index.json next to one valid shard: st_open must reject a
 * bad index with a message or accept a consistent one; never crash. */
#include "fuzz.h"
#include "st.h"

static void write_shard(void) {
    static int done;
    if (done)
        return;
    /* one F32 tensor "a" [2] and one vision tensor */
    const char *hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    uint8_t     buf[256];
    uint64_t    n = strlen(hdr);
    memcpy(buf, &n, 8);
    memcpy(buf + 8, hdr, n);
    memset(buf + 8 + n, 0, 8);
    fz_write("s1.safetensors", buf, 16 + n);
    done = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    write_shard();
    fz_write("model.safetensors.index.json", data, size);
    st_dir *d;
    if (st_open(fz_scratch(), &d) == K3_OK)
        st_close(d);
    else
        FZ_CHECK(k3_errmsg()[0] != 0);
    return 0;
}
