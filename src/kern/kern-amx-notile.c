/* kern-amx-notile.c: kern-amx.c with every tile instruction a no-op (kern-amx-tile.h,
 * KERN_AMX_EMU 2), as kern_amx_matmul_notile: the AMX kernel's work around the tiles alone (the
 * activations' B layout and quantizer, the nibble unpacking, the float combination, the stores),
 * timed by k3-bench amx on CPUs with or without AMX. Its results are meaningless (the C tiles are
 * never written); nothing but that benchmark calls it.
 */
#define KERN_AMX_EMU 2
#include "kern-amx.c"
