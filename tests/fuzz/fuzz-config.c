/* fuzz-config.c: config.json (and generation_config.json from the same bytes' second half):
 * cfg_load validates or rejects with a message naming the key, never crashes. */
#include "config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t cut = size;
    for (size_t i = 0; i < size; i++)
        if (data[i] == 0) {
            cut = i;
            break;
        }
    fz_write("config.json", data, cut);
    if (cut < size)
        fz_write("generation_config.json", data + cut + 1, size - cut - 1);
    else
        unlink(fz_write("generation_config.json", data, 0));
    k3_config c;
    if (cfg_load(fz_scratch(), &c) != K3_OK)
        FZ_CHECK(k3_errmsg()[0] != 0);
    else
        FZ_CHECK(c.n_layers > 0 && c.hidden > 0);
    return 0;
}
