# k3chat: C inference engine for Kimi K3 and its terminal chat.
#
# Layout is architecture (README's Layout table; include paths per folder: INC_ below):
#   include/k3.h       public engine API: the only engine header ui/ sees
#   src/*/*.c    -> $(B)/libk3.a    engine parts: base, kern, format, tok, conv, model, vk, grammar
#   ui/*/*.c     -> $(B)/libk3ui.a  front ends: common, tui, cli (ui/cli/main.c is k3chat's main), serve
#   tools/k3-*.c -> $(B)/k3-*         one program per file (generator, repacker, ...; tool-opt.h shared),
#                                     plus its parts tools/NAME-*.c (tools/mkmodel-bpe.c -> k3-mkmodel)
#   bench/*.c    -> $(B)/k3-bench     all benchmarks in one program
#   tests/test-*.c -> $(B)/tests/test-*   C tests; tests/t-*.sh and tests/t-*.py are script tests
#   shaders/*.comp -> $(B)/shaders/*.spv -> embedded C arrays (VK=1 only)
#
# Targets (named, commented, llama2.c style):
#   all      build everything into build/
#   check    install deps, build the normal tree, run every test on it and on the ASan/UBSan tree,
#            which builds (with the fuzz tree) beside the first tree's tests (tests/run.sh --bg;
#            K3_TEST_JOBS tests at a time, default 3; summaries in a fixed order)
#   test     run the tests against an existing build (no deps, no asan)
#   tested   build what the tests run: all but k3-bench (make check's ASan tree)
#   asan     build the sanitizer tree into build-asan/
#   demo     build and open k3chat on k3-nano (models/k3-nano, a trained K3-architecture model)
#   nano     retrain k3-nano from scratch (CPU, about eight and a half hours; NANO_1..7, see models/k3-nano/README.md)
#   bench    run the benchmarks (figures go in BENCHMARKS.md)
#   install  PREFIX=/usr/local DESTDIR= (programs, man pages, themes)
#   clean    remove every build tree (build, build-asan, build-fuzz, build-*)
#
# Knobs: VK=0/1 (default: 1 when the Vulkan loader and glslc are found), B=build dir,
#        SAN=1 (sanitizer build), DEBUG=1, CI=true adds -Werror.

B       ?= build
PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= cc
PKG     ?= pkg-config
VERSION := $(shell cat VERSION 2>/dev/null || echo 0.1.0)

# Vulkan: on when the loader (pkg-config vulkan) and glslc are both present.
VK_AUTO := $(shell $(PKG) --exists vulkan 2>/dev/null && command -v glslc >/dev/null 2>&1 && echo 1 || echo 0)
VK      ?= $(VK_AUTO)

PKGS := ncursesw libedit libutf8proc jansson libcurl md4c
ifeq ($(VK),1)
PKGS += vulkan
endif

WARN := -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wpointer-arith -Wcast-qual -Wdouble-promotion -Wformat=2 \
        -Werror=implicit-function-declaration -Wno-unused-parameter
ifeq ($(CI),true)
WARN += -Werror
endif

OPT := -O2 -g
ifeq ($(DEBUG),1)
OPT := -O0 -g
endif
# The sanitizer trees keep line tables only (-g1; clang: -gline-tables-only): what a sanitizer's
# or libFuzzer's report needs for file:line frames (UBSan's locations are compiled in), at three
# quarters of -g's compile time (the ASan tree is make check's longest build); DEBUG=1 builds a
# normal tree with full -g for a debugger.
SANFLAGS :=
ifeq ($(SAN),fuzz)
SANFLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
OPT := -O1 -gline-tables-only -fno-omit-frame-pointer $(SANFLAGS)
endif
ifeq ($(SAN),1)
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined
OPT := -O1 -g1 -fno-omit-frame-pointer $(SANFLAGS)
endif

PKG_CFLAGS := $(shell $(PKG) --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell $(PKG) --libs $(PKGS) 2>/dev/null)

CFLAGS  ?=
# -ffp-contract=off: a*b+c rounds twice unless the source says fmaf, at every kernel level and
# with every compiler (GCC's ISO C default; clang's is on): the scalar twins and the SIMD
# kernels' scalar tails then round the same way (the one rounding order, kern-impl.h, kern.c).
CFLAGS  += -std=c11 -D_GNU_SOURCE -ffp-contract=off $(OPT) $(WARN) -fopenmp -pthread -MMD -MP \
           -I$(B)/gen $(PKG_CFLAGS) -DK3_VERSION='"$(VERSION)"' -DK3_VK=$(VK)
LDFLAGS ?=
LDFLAGS += -fopenmp -pthread $(SANFLAGS)
LDLIBS  := $(PKG_LIBS) -lm

# Include paths per folder: a folder sees its own headers and these, nothing else.
# The seams are enforced here: a front end that includes an engine internal fails to compile.
INC_include := include
INC_src/base := src/base include
INC_src/kern := src/kern src/base include
INC_src/format := src/format src/kern src/base include
INC_src/tok := src/tok src/base include
INC_src/conv := src/conv src/base include
INC_src/grammar := src/grammar src/base include
INC_src/model := src/model src/vk src/format src/kern src/base include
INC_src/vk := src/vk src/kern src/base include $(B)/gen
INC_ui/common := ui/common include
INC_ui/tui := ui/tui ui/common include
INC_ui/cli := ui/cli ui/common include
INC_ui/serve := ui/serve ui/common include
# main picks the mode: it alone sees every front end's header (ui/cli, ui/tui, ui/serve)
INC_ui/cli/main.c := ui/cli ui/tui ui/serve ui/common include
INC_tools := tools src/format src/kern src/base ui/common include
# bench-uimd times the Markdown renderer of the UI
INC_bench/bench-uimd.c := bench ui/common include
INC_bench := bench src/grammar src/model src/vk src/format src/kern src/tok src/conv src/base include
# bench-main quotes its argument in messages through txt_term_printf, as the tools do
INC_bench/bench-main.c := $(INC_bench) ui/common
INC_tests := tests src/grammar src/model src/vk src/format src/kern src/tok src/conv src/base include ui/common ui/tui ui/cli ui/serve
INC_tests/fuzz := tests/fuzz src/grammar src/model src/vk src/format src/kern src/tok src/conv src/base include ui/common ui/tui ui/cli ui/serve
# -I flags for source file $(1): its folder's INC_ list (an unknown folder is an error)
incs = $(addprefix -I,$(or $(INC_$(1)),$(INC_$(patsubst %/,%,$(dir $(1)))),$(error no INC_ line in the Makefile for $(dir $(1)))))
# ---- sources ---------------------------------------------------------------
SRC_ALL := $(sort $(wildcard src/*/*.c))
ifeq ($(VK),1)
SRC := $(SRC_ALL)
else
SRC := $(filter-out src/vk/%.c,$(SRC_ALL))
endif
# UI_DIRS: the front-end folders in libk3ui.a (fuzz-build: only those the fuzz targets call)
UI_DIRS   ?= $(wildcard ui/*)
UI_SRC    := $(filter-out ui/cli/main.c,$(sort $(wildcard $(addsuffix /*.c,$(UI_DIRS)))))
TOOL_SRC  := $(sort $(wildcard tools/k3-*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))
TEST_SRC  := $(sort $(wildcard tests/test-*.c))
SHADERS   := $(sort $(wildcard shaders/*.comp))

LIB_OBJ   := $(SRC:%.c=$(B)/obj/%.o)
UI_OBJ    := $(UI_SRC:%.c=$(B)/obj/%.o)
TOOLS     := $(TOOL_SRC:tools/%.c=$(B)/%)
TESTS     := $(TEST_SRC:tests/%.c=$(B)/tests/%)
SPV       := $(SHADERS:shaders/%.comp=$(B)/shaders/%.spv)
SPV_H     := $(if $(filter 1,$(VK)),$(B)/gen/shaders_spv.h)

PROGS := $(B)/k3chat $(TOOLS) $(if $(BENCH_SRC),$(B)/k3-bench)

# keep objects of single-file programs (no implicit-rule deletion)
.SECONDARY:

.PHONY: all tested check test asan demo nano bench install clean deps shaders fuzz fuzz-build
all: $(PROGS) $(TESTS)
# what the tests run (all but k3-bench, which no test runs): make check's sanitizer tree
tested: $(B)/k3chat $(TOOLS) $(TESTS)

# ---- compile ----------------------------------------------------------------
# V=1 shows full command lines.
Q := $(if $(filter 1,$(V)),,@)

$(B)/obj/%.o: %.c | $(SPV_H)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) $(call incs,$<) -c $< -o $@

$(B)/libk3.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(B)/libk3ui.a: $(UI_OBJ)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ && ar rcs $@ $^

LIBS := $(B)/libk3ui.a $(B)/libk3.a

$(B)/k3chat: $(B)/obj/ui/cli/main.o $(LIBS)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

# a tool k3-NAME is tools/k3-NAME.c plus its parts tools/NAME-*.c, if any
$(foreach t,$(TOOL_SRC:tools/k3-%.c=%),$(eval $(B)/k3-$(t): $(patsubst %.c,$(B)/obj/%.o,$(wildcard tools/$(t)-*.c))))
$(B)/k3-%: $(B)/obj/tools/k3-%.o $(LIBS)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIBS) $(LDLIBS)

$(B)/k3-bench: $(BENCH_SRC:%.c=$(B)/obj/%.o) $(LIBS)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIBS) $(LDLIBS)

$(B)/tests/%: $(B)/obj/tests/%.o $(LIBS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

# ---- shaders: GLSL -> SPIR-V -> one generated header of C arrays -------------
shaders: $(SPV_H)
$(B)/shaders/%.spv: shaders/%.comp $(wildcard shaders/*.glsl)
	@mkdir -p $(dir $@)
	glslc --target-env=vulkan1.2 -O -Ishaders -o $@ $<

$(B)/gen/shaders_spv.h: $(SPV) scripts/embed.sh
	@mkdir -p $(dir $@)
	sh scripts/embed.sh $@ $(SPV)

# ---- meta targets ------------------------------------------------------------
deps:
	@sh scripts/deps.sh

# Build the first tree, then run everything once per tree. CI calls exactly this (a plain
# `make check` on 2 cores). The ASan/UBSan tree and then the fuzz tree (clang, when installed;
# t-fuzz reports a failed build) are built at nice 10 while the first tree's tests run
# (tests/run.sh --bg: those tests wait on tmux, timers and servers more than they compute);
# the sanitizer tree's tests (it builds what they run: make tested) start once it is built, and
# tests marked "# run-alone" or "# after-build" once both builds have ended. Each tree builds with one job per core;
# tests/run.sh runs K3_TEST_JOBS tests at a time (default 3), printing their summaries in the
# usual order.
CHECK_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
check: deps
	$(MAKE) -j$(CHECK_JOBS) all
	sh tests/run.sh --bg build-asan '$(MAKE) -j$(CHECK_JOBS) tested B=build-asan SAN=1' \
	    --bg build-fuzz 'command -v clang >/dev/null || exit 0; $(MAKE) -j$(CHECK_JOBS) fuzz-build || true' \
	    build build-asan

test: all
	sh tests/run.sh $(B)

asan:
	$(MAKE) all B=build-asan SAN=1

bench: deps all
	$(B)/k3-bench $(BENCH_ARGS)

demo: deps all
	sh scripts/demo.sh $(B)

# k3-nano's training recipe (make nano): tools/nano.mk
include tools/nano.mk

# ---- fuzzing (libFuzzer, clang): tests/fuzz/fuzz-*.c, seed corpora in tests/fuzz/corpus/NAME ----
# `make fuzz` runs each target for FUZZ_SECONDS (default 60); make check runs each briefly
# (tests/t-fuzz.sh). Findings land in build-fuzz/findings/.
FUZZ_SRC     := $(sort $(wildcard tests/fuzz/fuzz-*.c))
FUZZ_B       := build-fuzz
FUZZ_SECONDS ?= 60
# The fuzz targets call the engine, ui/common and ui/serve: the fuzz tree's libk3ui.a leaves out
# the full-screen and line front ends (ui/tui, ui/cli), an eighth of the lines it would compile.
FUZZ_UI_DIRS := ui/common ui/serve
fuzz-build:
	$(MAKE) $(FUZZ_B)/libk3.a $(FUZZ_B)/libk3ui.a B=$(FUZZ_B) CC=clang SAN=fuzz CI= VK=$(VK) WARN=-w UI_DIRS="$(FUZZ_UI_DIRS)"
	@mkdir -p $(FUZZ_B)/fuzz
	@for f in $(FUZZ_SRC); do n=$$(basename $$f .c); \
	  if [ ! -x $(FUZZ_B)/fuzz/$$n ] || [ $$f -nt $(FUZZ_B)/fuzz/$$n ] || [ $(FUZZ_B)/libk3.a -nt $(FUZZ_B)/fuzz/$$n ] \
	     || [ $(FUZZ_B)/libk3ui.a -nt $(FUZZ_B)/fuzz/$$n ]; then \
	    echo "  FUZZ    $$n"; \
	    clang -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Werror -gline-tables-only -O1 -fsanitize=fuzzer,address,undefined $(call incs,tests/fuzz/x.c) \
	      $(PKG_CFLAGS) -DK3_VK=$(VK) $$f -o $(FUZZ_B)/fuzz/$$n $(FUZZ_B)/libk3ui.a $(FUZZ_B)/libk3.a \
	      -fopenmp -pthread $(LDLIBS) || exit 1; fi; done

fuzz: fuzz-build
	sh tests/fuzz/run.sh $(FUZZ_B) $(FUZZ_SECONDS)

# install needs only the programs (not the tests), so it never rebuilds more than it installs
install: $(PROGS)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	           $(DESTDIR)$(PREFIX)/share/man/man5 $(DESTDIR)$(PREFIX)/share/k3chat/themes
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(wildcard man/*.1) $(DESTDIR)$(PREFIX)/share/man/man1/
	$(if $(wildcard man/*.5),install -m 644 $(wildcard man/*.5) $(DESTDIR)$(PREFIX)/share/man/man5/)
	$(if $(wildcard themes/*.theme),install -m 644 $(wildcard themes/*.theme) $(DESTDIR)$(PREFIX)/share/k3chat/themes/)

# every build tree: build/, build-asan/, build-fuzz/ and any other build-*/ (.gitignore's list)
clean:
	rm -rf $(sort build build-asan $(FUZZ_B) $(wildcard build-*))

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
