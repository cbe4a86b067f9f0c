/* fuzz-config.c: config.json (and generation_config.json from the same bytes' second half):
 * cfg_load validates or rejects with a message naming the key, never crashes. */
#include "config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_write_split("config.json", "generation_config.json", data, size);
    k3_config c;
    if (cfg_load(fz_scratch(), &c) != K3_OK)
        FZ_CHECK(k3_errmsg()[0] != 0);
    else
        FZ_CHECK(c.n_layers > 0 && c.hidden > 0);
    return 0;
}
