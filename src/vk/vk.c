/* vk.c: Vulkan compute tier: device, arena of resident weights, matvec and expert dispatch.
 *
 * DESIGN (see vk.h for the contract)
 * - One instance, one physical device (discrete preferred, K3_VK_DEVICE=N overrides), one
 *   compute queue, one command buffer reused for every submit, one fence.
 * - Arena: chunks of device-local memory, each one VkBuffer; uploads are bump-allocated at
 *   256-byte alignment and never freed. If the memory is host-visible (lavapipe, ReBAR)
 *   uploads are a memcpy into the persistent mapping; otherwise they go through a staging
 *   buffer and vkCmdCopyBuffer.
 * - X and Y: host-visible coherent buffers holding inputs and outputs of one submit.
 *   Descriptor set per chunk = {chunk buffer, X, Y}; they are rewritten when X/Y grow.
 * - Pipelines: one per weight format plus the GLU, all created in pipelines_create().
 * Every Vulkan call goes through VK_CHECK, which records the call text, file and line.
 */
#include "vk.h"
#include "vk-impl.h"

#include "shaders_spv.h"

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

#define VK_CHECK(call)                                                                                       \
    do {                                                                                                     \
        VkResult r_ = (call);                                                                                \
        if (r_ != VK_SUCCESS) {                                                                              \
            st = k3_err(r_ == VK_ERROR_OUT_OF_DEVICE_MEMORY || r_ == VK_ERROR_OUT_OF_HOST_MEMORY             \
                            ? K3_ERR_NOMEM                                                                   \
                            : K3_ERR_IO,                                                                     \
                        "vulkan: %s failed (VkResult %d) at %s:%d", #call, (int)r_, __FILE__, __LINE__);     \
            goto fail;                                                                                       \
        }                                                                                                    \
    } while (0)

#define ARENA_ALIGN 256u
#define CHUNK_DEFAULT (1024ull << 20)
#define MAX_CHUNKS 256
#define MAX_GROUPS_X 65535u

enum { PIPE_F32, PIPE_I8, PIPE_I4, PIPE_MXFP4, PIPE_GLU, PIPE_MEMBW, PIPE_COUNT };

typedef struct vk_buf {
    VkBuffer       buf;
    VkDeviceMemory mem;
    uint64_t       size;
    void          *map; /* persistent mapping when host-visible, else NULL */
} vk_buf;

typedef struct chunk {
    vk_buf          b;
    uint64_t        used;
    VkDescriptorSet set;
} chunk;

struct vk_ctx {
    VkInstance                       inst;
    VkPhysicalDevice                 phys;
    VkDevice                         dev;
    VkQueue                          queue;
    uint32_t                         qfam;
    VkCommandPool                    pool;
    VkCommandBuffer                  cmd;
    VkFence                          fence;
    VkDescriptorSetLayout            dsl;
    VkDescriptorPool                 dpool;
    VkPipelineLayout                 playout;
    VkPipeline                       pipe[PIPE_COUNT];
    VkPhysicalDeviceMemoryProperties memprops;
    char                             name[256];
    int                              is_cpu; /* VK_PHYSICAL_DEVICE_TYPE_CPU (lavapipe) */
    uint64_t                         budget, used;
    uint64_t                         chunk_size; /* <= maxStorageBufferRange */
    chunk                            chunks[MAX_CHUNKS];
    uint32_t                         n_chunks;
    vk_buf                           x, y;    /* host-visible I/O, floats */
    vk_buf                           staging; /* only when the arena is not host-visible */
};

/* ---- memory ---------------------------------------------------------------- */

static int find_memtype(const vk_ctx *c, uint32_t bits, VkMemoryPropertyFlags want) {
    for (uint32_t i = 0; i < c->memprops.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (c->memprops.memoryTypes[i].propertyFlags & want) == want)
            return (int)i;
    return -1;
}

/* Create a storage buffer; device_local: prefer DEVICE_LOCAL (mapped too if possible),
 * else HOST_VISIBLE|HOST_COHERENT (always mapped). */
static k3_status buf_create(vk_ctx *c, uint64_t size, int device_local, vk_buf *b) {
    k3_status st = K3_OK;
    memset(b, 0, sizeof *b);
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size  = size,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_SRC_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VK_CHECK(vkCreateBuffer(c->dev, &bi, NULL, &b->buf));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(c->dev, b->buf, &req);
    const VkMemoryPropertyFlags hv =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int mt = -1;
    if (device_local) {
        mt = find_memtype(c, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | hv);
        /* a small host-visible device-local heap (BAR without ReBAR) is no place for weights */
        if (mt >= 0 && c->memprops.memoryHeaps[c->memprops.memoryTypes[mt].heapIndex].size < (1ull << 30))
            mt = -1;
        if (mt < 0)
            mt = find_memtype(c, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    }
    if (mt < 0)
        mt = find_memtype(c, req.memoryTypeBits, hv);
    if (mt < 0) {
        st = k3_err(K3_ERR_UNSUPPORTED, "vulkan: no suitable memory type for a %llu-byte buffer",
                    (unsigned long long)size);
        goto fail;
    }
    VkMemoryAllocateInfo ai = {.sType           = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize  = req.size,
                               .memoryTypeIndex = (uint32_t)mt};
    VK_CHECK(vkAllocateMemory(c->dev, &ai, NULL, &b->mem));
    VK_CHECK(vkBindBufferMemory(c->dev, b->buf, b->mem, 0));
    if ((c->memprops.memoryTypes[mt].propertyFlags & hv) == hv)
        VK_CHECK(vkMapMemory(c->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map));
    b->size = size;
    return K3_OK;
fail:
    if (b->buf)
        vkDestroyBuffer(c->dev, b->buf, NULL);
    if (b->mem)
        vkFreeMemory(c->dev, b->mem, NULL);
    memset(b, 0, sizeof *b);
    return st;
}

static void buf_destroy(vk_ctx *c, vk_buf *b) {
    if (!b->buf)
        return;
    if (b->map)
        vkUnmapMemory(c->dev, b->mem);
    vkDestroyBuffer(c->dev, b->buf, NULL);
    vkFreeMemory(c->dev, b->mem, NULL);
    memset(b, 0, sizeof *b);
}

static void set_write(vk_ctx *c, chunk *ch) {
    VkDescriptorBufferInfo bi[3] = {
        {ch->b.buf, 0, VK_WHOLE_SIZE}, {c->x.buf, 0, VK_WHOLE_SIZE}, {c->y.buf, 0, VK_WHOLE_SIZE}};
    VkWriteDescriptorSet w[3];
    for (int i = 0; i < 3; i++)
        w[i] = (VkWriteDescriptorSet){.sType           = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstSet          = ch->set,
                                      .dstBinding      = (uint32_t)i,
                                      .descriptorCount = 1,
                                      .descriptorType  = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo     = &bi[i]};
    vkUpdateDescriptorSets(c->dev, 3, w, 0, NULL);
}

/* Make X and Y hold at least nx / ny floats (rewrites every chunk's descriptor set). */
static k3_status io_reserve(vk_ctx *c, uint64_t nx, uint64_t ny) {
    k3_status st;
    if (nx * 4 <= c->x.size && ny * 4 <= c->y.size)
        return K3_OK;
    vkDeviceWaitIdle(c->dev);
    if (nx * 4 > c->x.size) {
        buf_destroy(c, &c->x);
        if ((st = buf_create(c, nx * 4 + (1u << 20), 0, &c->x)) != K3_OK)
            return st;
    }
    if (ny * 4 > c->y.size) {
        buf_destroy(c, &c->y);
        if ((st = buf_create(c, ny * 4 + (1u << 20), 0, &c->y)) != K3_OK)
            return st;
    }
    for (uint32_t i = 0; i < c->n_chunks; i++)
        set_write(c, &c->chunks[i]);
    return K3_OK;
}

static k3_status chunk_add(vk_ctx *c, uint64_t size) {
    k3_status st = K3_OK;
    if (c->n_chunks == MAX_CHUNKS)
        return K3_ERR_NOMEM;
    chunk *ch = &c->chunks[c->n_chunks];
    memset(ch, 0, sizeof *ch);
    if ((st = buf_create(c, size, 1, &ch->b)) != K3_OK)
        return st;
    VkDescriptorSetAllocateInfo ai = {.sType              = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool     = c->dpool,
                                      .descriptorSetCount = 1,
                                      .pSetLayouts        = &c->dsl};
    VK_CHECK(vkAllocateDescriptorSets(c->dev, &ai, &ch->set));
    set_write(c, ch);
    c->n_chunks++;
    return K3_OK;
fail:
    buf_destroy(c, &ch->b);
    return st;
}

/* ---- command submission -------------------------------------------------------- */

static k3_status cmd_begin(vk_ctx *c) {
    k3_status st = K3_OK;
    VK_CHECK(vkResetCommandBuffer(c->cmd, 0));
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VK_CHECK(vkBeginCommandBuffer(c->cmd, &bi));
fail:
    return st;
}

static k3_status cmd_submit_wait(vk_ctx *c) {
    k3_status st = K3_OK;
    VK_CHECK(vkEndCommandBuffer(c->cmd));
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &c->cmd};
    VK_CHECK(vkResetFences(c->dev, 1, &c->fence));
    VK_CHECK(vkQueueSubmit(c->queue, 1, &si, c->fence));
    VK_CHECK(vkWaitForFences(c->dev, 1, &c->fence, VK_TRUE, UINT64_MAX));
fail:
    return st;
}

static void barrier(vk_ctx *c) {
    VkMemoryBarrier mb = {.sType         = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
    vkCmdPipelineBarrier(c->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* ---- set-up ---------------------------------------------------------------------- */

static k3_status pipelines_create(vk_ctx *c) {
    static const struct {
        const unsigned char *code;
        unsigned int         len;
    } spv[PIPE_COUNT] = {
        [PIPE_F32]   = {matvec_f32_spv, sizeof matvec_f32_spv},
        [PIPE_I8]    = {matvec_i8_spv, sizeof matvec_i8_spv},
        [PIPE_I4]    = {matvec_i4_spv, sizeof matvec_i4_spv},
        [PIPE_MXFP4] = {matvec_mxfp4_spv, sizeof matvec_mxfp4_spv},
        [PIPE_GLU]   = {glu_spv, sizeof glu_spv},
        [PIPE_MEMBW] = {membw_spv, sizeof membw_spv},
    };
    k3_status      st  = K3_OK;
    VkShaderModule mod = VK_NULL_HANDLE;
    for (int i = 0; i < PIPE_COUNT; i++) {
        uint32_t *words = malloc(spv[i].len); /* SPIR-V wants 4-byte alignment */
        if (!words)
            return K3_ERR_NOMEM;
        memcpy(words, spv[i].code, spv[i].len);
        VkShaderModuleCreateInfo mi = {
            .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = spv[i].len, .pCode = words};
        VkResult r = vkCreateShaderModule(c->dev, &mi, NULL, &mod);
        free(words);
        VK_CHECK(r);
        VkComputePipelineCreateInfo pi = {
            .sType  = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage  = {.sType  = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                       .stage  = VK_SHADER_STAGE_COMPUTE_BIT,
                       .module = mod,
                       .pName  = "main"},
            .layout = c->playout};
        VK_CHECK(vkCreateComputePipelines(c->dev, VK_NULL_HANDLE, 1, &pi, NULL, &c->pipe[i]));
        vkDestroyShaderModule(c->dev, mod, NULL);
        mod = VK_NULL_HANDLE;
    }
    return K3_OK;
fail:
    if (mod)
        vkDestroyShaderModule(c->dev, mod, NULL);
    return st;
}

/* Device-local memory the driver says we may use: VK_EXT_memory_budget when present. */
static uint64_t driver_budget(vk_ctx *c, int has_budget_ext) {
    uint64_t best = 0;
    if (has_budget_ext) {
        VkPhysicalDeviceMemoryBudgetPropertiesEXT bp = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
        VkPhysicalDeviceMemoryProperties2 mp2 = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, .pNext = &bp};
        vkGetPhysicalDeviceMemoryProperties2(c->phys, &mp2);
        for (uint32_t h = 0; h < c->memprops.memoryHeapCount; h++) {
            if (!(c->memprops.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT))
                continue;
            uint64_t avail = bp.heapBudget[h] > bp.heapUsage[h] ? bp.heapBudget[h] - bp.heapUsage[h] : 0;
            if (avail > best)
                best = avail;
        }
    }
    if (!best) /* no budget extension: 80% of the largest device-local heap */
        for (uint32_t h = 0; h < c->memprops.memoryHeapCount; h++)
            if ((c->memprops.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
                c->memprops.memoryHeaps[h].size / 10 * 8 > best)
                best = c->memprops.memoryHeaps[h].size / 10 * 8;
    return best;
}

/* ---- keeping the driver mapped ------------------------------------------------------------
 * The loader dlopens the driver (ICD) in vkCreateInstance and dlcloses it in vkDestroyInstance.
 * Some drivers (Mesa's lavapipe 22.3 among them) keep one-time allocations in their globals and
 * do not free them at unload; once the library is unmapped LeakSanitizer sees those blocks as
 * leaked from an "<unknown module>", so every sanitizer run that merely probed for a GPU failed.
 * A driver stays mapped until exit instead (RTLD_NODELETE on every object the instance brought
 * in): its globals stay reachable, and a later probe in the same process does not reload it. */
typedef struct {
    const char *names[64]; /* (n) objects mapped before vkCreateInstance; points into the link map */
    int         n;
    int         full; /* more than fit: pin nothing rather than guess */
} loaded_set;

static int loaded_add(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    loaded_set *s = arg;
    if (s->n == (int)(sizeof s->names / sizeof s->names[0]))
        s->full = 1;
    else
        s->names[s->n++] = info->dlpi_name;
    return 0;
}

static int pin_new(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    const loaded_set *before = arg;
    if (before->full || !info->dlpi_name || !*info->dlpi_name)
        return 0;
    for (int i = 0; i < before->n; i++)
        if (before->names[i] && !strcmp(before->names[i], info->dlpi_name))
            return 0;
    void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    if (h)
        dlclose(h); /* drops our reference; RTLD_NODELETE stays */
    return 0;
}

/* The instance (the driver kept mapped: see above). */
static k3_status instance_create(vk_ctx *c) {
    VkApplicationInfo    app    = {.sType            = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                                   .pApplicationName = "k3chat",
                                   .apiVersion       = VK_API_VERSION_1_2};
    VkInstanceCreateInfo ici    = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    loaded_set           before = {.n = 0};
    dl_iterate_phdr(loaded_add, &before);
    VkResult r = vkCreateInstance(&ici, NULL, &c->inst);
    dl_iterate_phdr(pin_new, &before);
    if (r != VK_SUCCESS)
        return k3_err(K3_ERR_UNSUPPORTED, "vulkan: no Vulkan driver (vkCreateInstance: %d)", (int)r);
    return K3_OK;
}

/* c->phys: K3_VK_DEVICE, else the best kind of device (discrete > integrated > other > CPU);
 * its name, memory properties and the chunk size it allows. */
static k3_status device_pick(vk_ctx *c) {
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(c->inst, &n, NULL);
    if (n == 0)
        return k3_err(K3_ERR_UNSUPPORTED, "vulkan: no Vulkan device found");
    VkPhysicalDevice devs[16];
    if (n > 16)
        n = 16;
    vkEnumeratePhysicalDevices(c->inst, &n, devs);
    int       pick = -1;
    k3_status st   = k3_setting_env_int(K3_SETTING_VK_DEVICE, &pick);
    if (st)
        return st;
    if (pick >= (int)n)
        return k3_err(K3_ERR_ARG, "K3_VK_DEVICE: '%d' is not a device index in 0..%u", pick, n - 1);
    if (pick < 0) { /* discrete > integrated > anything else (lavapipe, the CPU device, last) */
        int best = -1;
        for (uint32_t i = 0; i < n; i++) {
            VkPhysicalDeviceProperties p;
            vkGetPhysicalDeviceProperties(devs[i], &p);
            int score = p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU     ? 3
                        : p.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ? 2
                        : p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU            ? 0
                                                                                 : 1;
            if (score > best) {
                best = score;
                pick = (int)i;
            }
        }
    }
    c->phys = devs[pick];
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(c->phys, &props);
    snprintf(c->name, sizeof c->name, "%s", props.deviceName);
    c->is_cpu = props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    vkGetPhysicalDeviceMemoryProperties(c->phys, &c->memprops);
    c->chunk_size = CHUNK_DEFAULT;
    if (props.limits.maxStorageBufferRange < c->chunk_size)
        c->chunk_size = props.limits.maxStorageBufferRange & ~(uint64_t)(ARENA_ALIGN - 1);
    return K3_OK;
}

/* c->qfam: the first queue family that computes. */
static k3_status queue_pick(vk_ctx *c) {
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(c->phys, &nq, NULL);
    VkQueueFamilyProperties qf[32];
    if (nq > 32)
        nq = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(c->phys, &nq, qf);
    c->qfam = UINT32_MAX;
    for (uint32_t i = 0; i < nq; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
            c->qfam = i;
            break;
        }
    if (c->qfam == UINT32_MAX)
        return k3_err(K3_ERR_UNSUPPORTED, "vulkan: device '%s' has no compute queue", c->name);
    return K3_OK;
}

/* The logical device and its queue, with VK_EXT_memory_budget where the device has it
 * (*has_budget). */
static k3_status device_create(vk_ctx *c, int *has_budget) {
    k3_status st  = K3_OK;
    *has_budget   = 0;
    uint32_t next = 0;
    vkEnumerateDeviceExtensionProperties(c->phys, NULL, &next, NULL);
    VkExtensionProperties *exts = calloc(next ? next : 1, sizeof *exts);
    if (exts) {
        vkEnumerateDeviceExtensionProperties(c->phys, NULL, &next, exts);
        for (uint32_t i = 0; i < next; i++)
            if (!strcmp(exts[i].extensionName, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME))
                *has_budget = 1;
        free(exts);
    }
    const char             *dev_exts[] = {VK_EXT_MEMORY_BUDGET_EXTENSION_NAME};
    float                   prio       = 1.0f;
    VkDeviceQueueCreateInfo qi         = {.sType            = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                          .queueFamilyIndex = c->qfam,
                                          .queueCount       = 1,
                                          .pQueuePriorities = &prio};
    VkDeviceCreateInfo      di         = {.sType                   = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                                          .queueCreateInfoCount    = 1,
                                          .pQueueCreateInfos       = &qi,
                                          .enabledExtensionCount   = *has_budget ? 1u : 0u,
                                          .ppEnabledExtensionNames = dev_exts};
    VK_CHECK(vkCreateDevice(c->phys, &di, NULL, &c->dev));
    vkGetDeviceQueue(c->dev, c->qfam, 0, &c->queue);
    return K3_OK;
fail:
    return st;
}

/* The command pool, its one command buffer and the fence of a submit. */
static k3_status commands_create(vk_ctx *c) {
    k3_status               st  = K3_OK;
    VkCommandPoolCreateInfo pci = {.sType            = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags            = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = c->qfam};
    VK_CHECK(vkCreateCommandPool(c->dev, &pci, NULL, &c->pool));
    VkCommandBufferAllocateInfo cai = {.sType              = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                       .commandPool        = c->pool,
                                       .level              = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                       .commandBufferCount = 1};
    VK_CHECK(vkAllocateCommandBuffers(c->dev, &cai, &c->cmd));
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VK_CHECK(vkCreateFence(c->dev, &fci, NULL, &c->fence));
    return K3_OK;
fail:
    return st;
}

/* The layouts every pipeline shares: three storage buffers and 32 bytes of push constants. */
static k3_status layouts_create(vk_ctx *c) {
    k3_status                    st = K3_OK;
    VkDescriptorSetLayoutBinding b[3];
    for (int i = 0; i < 3; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding         = (uint32_t)i,
                                              .descriptorType  = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags      = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dli = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = 3, .pBindings = b};
    VK_CHECK(vkCreateDescriptorSetLayout(c->dev, &dli, NULL, &c->dsl));
    VkDescriptorPoolSize       ps  = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 3 * MAX_CHUNKS};
    VkDescriptorPoolCreateInfo dpi = {.sType         = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                      .flags         = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT,
                                      .maxSets       = MAX_CHUNKS,
                                      .poolSizeCount = 1,
                                      .pPoolSizes    = &ps};
    VK_CHECK(vkCreateDescriptorPool(c->dev, &dpi, NULL, &c->dpool));
    VkPushConstantRange        pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 32};
    VkPipelineLayoutCreateInfo pli = {.sType                  = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount         = 1,
                                      .pSetLayouts            = &c->dsl,
                                      .pushConstantRangeCount = 1,
                                      .pPushConstantRanges    = &pcr};
    VK_CHECK(vkCreatePipelineLayout(c->dev, &pli, NULL, &c->playout));
    return K3_OK;
fail:
    return st;
}

k3_status vk_ctx_new(uint64_t budget_bytes, vk_ctx **out) {
    k3_status st = K3_OK;
    *out         = NULL;
    int on       = -1;
    if (k3_setting_env_int(K3_SETTING_VK, &on) == K3_OK && on == 0)
        return k3_err(K3_ERR_UNSUPPORTED, "vulkan: disabled by K3_VK=0");
    vk_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return K3_ERR_NOMEM;

    int has_budget = 0;
    if ((st = instance_create(c)) != K3_OK || (st = device_pick(c)) != K3_OK ||
        (st = queue_pick(c)) != K3_OK || (st = device_create(c, &has_budget)) != K3_OK ||
        (st = commands_create(c)) != K3_OK || (st = layouts_create(c)) != K3_OK)
        goto fail;
    if ((st = pipelines_create(c)) != K3_OK)
        goto fail;
    if ((st = io_reserve(c, 1u << 20, 1u << 20)) != K3_OK)
        goto fail;

    /* K3_VK_GB is a ceiling: above what the device reports available, uploads would fail in
     * the middle of a run (or spill into system memory), so the budget is the device's figure */
    uint64_t avail = driver_budget(c, has_budget);
    c->budget      = budget_bytes && (!avail || budget_bytes <= avail) ? budget_bytes : avail;
    if (budget_bytes && avail && budget_bytes > avail)
        K3_LOG_WARN("vulkan: K3_VK_GB=%.2f GB is more than the %.2f GB '%s' reports available: using %.2f GB",
                    budget_bytes / 1e9, avail / 1e9, c->name, avail / 1e9);
    K3_LOG_DEBUG("vulkan: opened '%s', budget %.2f GB", c->name, c->budget / 1e9); /* vkt_open says if used */
    *out = c;
    return K3_OK;
fail:
    vk_ctx_free(c);
    return st;
}

void vk_ctx_free(vk_ctx *c) {
    if (!c)
        return;
    if (c->dev) {
        vkDeviceWaitIdle(c->dev);
        for (uint32_t i = 0; i < c->n_chunks; i++)
            buf_destroy(c, &c->chunks[i].b);
        buf_destroy(c, &c->x);
        buf_destroy(c, &c->y);
        buf_destroy(c, &c->staging);
        for (int i = 0; i < PIPE_COUNT; i++)
            if (c->pipe[i])
                vkDestroyPipeline(c->dev, c->pipe[i], NULL);
        if (c->playout)
            vkDestroyPipelineLayout(c->dev, c->playout, NULL);
        if (c->dpool)
            vkDestroyDescriptorPool(c->dev, c->dpool, NULL);
        if (c->dsl)
            vkDestroyDescriptorSetLayout(c->dev, c->dsl, NULL);
        if (c->fence)
            vkDestroyFence(c->dev, c->fence, NULL);
        if (c->pool)
            vkDestroyCommandPool(c->dev, c->pool, NULL);
        vkDestroyDevice(c->dev, NULL);
    }
    if (c->inst)
        vkDestroyInstance(c->inst, NULL);
    free(c);
}

int vk_device_is_cpu(const vk_ctx *c) {
    return c->is_cpu;
}

const char *vk_device_name(const vk_ctx *c) {
    return c->name;
}
uint64_t vk_budget(const vk_ctx *c) {
    return c->budget;
}
uint64_t vk_used(const vk_ctx *c) {
    return c->used;
}

/* ---- upload ---------------------------------------------------------------------- */

static uint64_t align_up(uint64_t v, uint64_t a) {
    return (v + a - 1) / a * a;
}

/* Copy n bytes to chunk ch at offset off: memcpy when mapped, else through staging. */
static k3_status chunk_write(vk_ctx *c, chunk *ch, uint64_t off, const void *src, uint64_t n) {
    k3_status st = K3_OK;
    if (ch->b.map) {
        memcpy((char *)ch->b.map + off, src, n);
        return K3_OK;
    }
    const uint64_t piece = 64ull << 20;
    if (!c->staging.buf && (st = buf_create(c, piece, 0, &c->staging)) != K3_OK)
        return st;
    for (uint64_t done = 0; done < n; done += piece) {
        uint64_t len = n - done < piece ? n - done : piece;
        memcpy(c->staging.map, (const char *)src + done, len);
        if ((st = cmd_begin(c)) != K3_OK)
            return st;
        VkBufferCopy cp = {0, off + done, len};
        vkCmdCopyBuffer(c->cmd, c->staging.buf, ch->b.buf, 1, &cp);
        if ((st = cmd_submit_wait(c)) != K3_OK)
            return st;
    }
    return K3_OK;
}

k3_status vk_upload(vk_ctx *c, const qmat *m, vk_mat *out) {
    k3_status st;
    uint64_t  wb = q_wbytes(m->type, m->rows, m->cols), sb = q_sbytes(m->type, m->rows, m->cols);
    uint64_t  need = align_up(wb, ARENA_ALIGN) + align_up(sb, ARENA_ALIGN);
    if (need > c->chunk_size && need > UINT32_MAX)
        return k3_err(K3_ERR_UNSUPPORTED, "vulkan: a %llu-byte matrix exceeds the device's buffer range",
                      (unsigned long long)need);
    if (c->used + need > c->budget)
        return K3_ERR_NOMEM;
    chunk *ch = c->n_chunks ? &c->chunks[c->n_chunks - 1] : NULL;
    if (!ch || ch->used + need > ch->b.size) {
        uint64_t room = c->budget - c->used; /* >= need here */
        uint64_t size = c->chunk_size < room ? c->chunk_size : align_up(room, ARENA_ALIGN);
        if (size < need)
            size = need;
        if ((st = chunk_add(c, size)) != K3_OK) {
            if (st == K3_ERR_NOMEM)
                c->budget = c->used; /* the driver refused: the tier is full from now on */
            return st;
        }
        ch = &c->chunks[c->n_chunks - 1];
    }
    uint64_t w_off = ch->used, s_off = w_off + align_up(wb, ARENA_ALIGN);
    if ((st = chunk_write(c, ch, w_off, m->w, wb)) != K3_OK)
        return st;
    if (sb && (st = chunk_write(c, ch, s_off, m->type == Q_MXFP4 ? (const void *)m->e : (const void *)m->s,
                                sb)) != K3_OK)
        return st;
    ch->used += need;
    c->used += need;
    *out = (vk_mat){.type  = m->type,
                    .rows  = m->rows,
                    .cols  = m->cols,
                    .chunk = (uint32_t)(ch - c->chunks),
                    .w_off = (uint32_t)w_off,
                    .s_off = (uint32_t)s_off};
    return K3_OK;
}

/* ---- dispatch -------------------------------------------------------------------- */

static void record_matvec(vk_ctx *c, const vk_mat *m, uint32_t x_off, uint32_t y_off) {
    static const int pipe_of[] = {
        [Q_F32] = PIPE_F32, [Q_I8] = PIPE_I8, [Q_I4] = PIPE_I4, [Q_MXFP4] = PIPE_MXFP4};
    vk_pc_matvec pc = {.rows  = (uint32_t)m->rows,
                       .cols  = (uint32_t)m->cols,
                       .w_off = m->w_off,
                       .s_off = m->s_off,
                       .x_off = x_off,
                       .y_off = y_off};
    vkCmdBindPipeline(c->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, c->pipe[pipe_of[m->type]]);
    vkCmdBindDescriptorSets(c->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, c->playout, 0, 1,
                            &c->chunks[m->chunk].set, 0, NULL);
    vkCmdPushConstants(c->cmd, c->playout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof pc, &pc);
    uint32_t gx = (uint32_t)m->rows < MAX_GROUPS_X ? (uint32_t)m->rows : MAX_GROUPS_X;
    uint32_t gy = ((uint32_t)m->rows + MAX_GROUPS_X - 1) / MAX_GROUPS_X;
    vkCmdDispatch(c->cmd, gx, gy, 1);
}

k3_status vk_matvec(vk_ctx *c, const vk_job *jobs, int n) {
    k3_status st;
    uint64_t  nx = 0, ny = 0;
    for (int i = 0; i < n; i++) {
        nx += (uint64_t)jobs[i].m->cols;
        ny += (uint64_t)jobs[i].m->rows;
    }
    if ((st = io_reserve(c, nx, ny)) != K3_OK)
        return st;
    if ((st = cmd_begin(c)) != K3_OK)
        return st;
    uint64_t xo = 0, yo = 0;
    for (int i = 0; i < n; i++) {
        memcpy((float *)c->x.map + xo, jobs[i].x, (size_t)jobs[i].m->cols * 4);
        record_matvec(c, jobs[i].m, (uint32_t)xo, (uint32_t)yo);
        xo += (uint64_t)jobs[i].m->cols;
        yo += (uint64_t)jobs[i].m->rows;
    }
    if ((st = cmd_submit_wait(c)) != K3_OK)
        return st;
    yo = 0;
    for (int i = 0; i < n; i++) {
        memcpy(jobs[i].y, (const float *)c->y.map + yo, (size_t)jobs[i].m->rows * 4);
        yo += (uint64_t)jobs[i].m->rows;
    }
    return K3_OK;
}

k3_status vk_expert_ffn(vk_ctx *c, int n, const vk_mat *const *mats, const float *z, float beta1, float beta2,
                        float *out) {
    k3_status st;
    if (n <= 0)
        return K3_OK;
    const uint32_t in = (uint32_t)mats[0]->cols, F = (uint32_t)mats[0]->rows, L = (uint32_t)mats[2]->rows;
    /* X: z at 0, then each expert's GLU output [F]; Y: each expert's g [F], u [F], out [L] */
    uint64_t nx = in + (uint64_t)n * F, ny = (uint64_t)n * (2 * F + L);
    if ((st = io_reserve(c, nx, ny)) != K3_OK)
        return st;
    memcpy(c->x.map, z, (size_t)in * 4);
    if ((st = cmd_begin(c)) != K3_OK)
        return st;
    for (int e = 0; e < n; e++) { /* gate and up of every expert */
        uint32_t yb = (uint32_t)e * (2 * F + L);
        record_matvec(c, mats[3 * e + 0], 0, yb);
        record_matvec(c, mats[3 * e + 1], 0, yb + F);
    }
    barrier(c);
    vkCmdBindPipeline(c->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, c->pipe[PIPE_GLU]);
    for (int e = 0; e < n; e++) {
        uint32_t  yb = (uint32_t)e * (2 * F + L);
        vk_pc_glu pc = {.n     = F,
                        .g_off = yb,
                        .u_off = yb + F,
                        .o_off = in + (uint32_t)e * F,
                        .beta1 = beta1,
                        .beta2 = beta2};
        vkCmdBindDescriptorSets(c->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, c->playout, 0, 1,
                                &c->chunks[mats[3 * e]->chunk].set, 0, NULL);
        vkCmdPushConstants(c->cmd, c->playout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof pc, &pc);
        vkCmdDispatch(c->cmd, (F + 63) / 64, 1, 1);
    }
    barrier(c);
    for (int e = 0; e < n; e++) {
        uint32_t yb = (uint32_t)e * (2 * F + L);
        record_matvec(c, mats[3 * e + 2], in + (uint32_t)e * F, yb + 2 * F);
    }
    if ((st = cmd_submit_wait(c)) != K3_OK)
        return st;
    for (int e = 0; e < n; e++)
        memcpy(out + (size_t)e * L, (const float *)c->y.map + (size_t)e * (2 * F + L) + 2 * F, (size_t)L * 4);
    return K3_OK;
}

/* ---- benchmark support ---------------------------------------------------------- */

k3_status vk_read_bandwidth(vk_ctx *c, uint64_t bytes, int reps, double *gbps) {
    k3_status st = K3_OK;
    chunk     tmp;
    memset(&tmp, 0, sizeof tmp);
    if (bytes > c->chunk_size) /* one storage buffer range at most */
        bytes = c->chunk_size;
    bytes &= ~(uint64_t)15;
    if ((st = buf_create(c, bytes, 1, &tmp.b)) != K3_OK)
        return st;
    VkDescriptorSetAllocateInfo ai = {.sType              = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool     = c->dpool,
                                      .descriptorSetCount = 1,
                                      .pSetLayouts        = &c->dsl};
    VK_CHECK(vkAllocateDescriptorSets(c->dev, &ai, &tmp.set));
    const uint32_t groups = 1024;
    if ((st = io_reserve(c, 0, groups)) != K3_OK)
        goto fail;
    set_write(c, &tmp);
    if ((st = cmd_begin(c)) != K3_OK)
        goto fail;
    vkCmdFillBuffer(c->cmd, tmp.b.buf, 0, VK_WHOLE_SIZE, 0x5a5a5a5au);
    if ((st = cmd_submit_wait(c)) != K3_OK)
        goto fail;
    double best = 0;
    for (int r = 0; r < reps; r++) {
        if ((st = cmd_begin(c)) != K3_OK)
            goto fail;
        uint32_t pc[8] = {(uint32_t)(bytes / 16)};
        vkCmdBindPipeline(c->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, c->pipe[PIPE_MEMBW]);
        vkCmdBindDescriptorSets(c->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, c->playout, 0, 1, &tmp.set, 0, NULL);
        vkCmdPushConstants(c->cmd, c->playout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof pc, pc);
        vkCmdDispatch(c->cmd, groups, 1, 1);
        double t0 = k3_time();
        if ((st = cmd_submit_wait(c)) != K3_OK)
            goto fail;
        double g = (double)bytes / (k3_time() - t0) / 1e9;
        if (g > best)
            best = g;
    }
    *gbps = best;
fail:
    if (tmp.set)
        vkFreeDescriptorSets(c->dev, c->dpool, 1, &tmp.set);
    buf_destroy(c, &tmp.b);
    return st;
}

k3_status vk_matvec_repeat(vk_ctx *c, const vk_mat *m, const float *x, int reps, double *seconds) {
    k3_status st;
    if ((st = io_reserve(c, (uint64_t)m->cols, (uint64_t)m->rows)) != K3_OK)
        return st;
    memcpy(c->x.map, x, (size_t)m->cols * 4);
    if ((st = cmd_begin(c)) != K3_OK)
        return st;
    for (int r = 0; r < reps; r++) {
        record_matvec(c, m, 0, 0);
        barrier(c);
    }
    double t0 = k3_time();
    if ((st = cmd_submit_wait(c)) != K3_OK)
        return st;
    *seconds = k3_time() - t0;
    return K3_OK;
}
