# Build with a C++17 compiler alone. Finds nvcc by itself (CUDA=0 to skip, CUDA_ARCH=90 to pick
# architectures), or else hipcc for AMD GPUs (HIP=0 to skip). CMakeLists.txt builds the same
# targets (CPU and CUDA) for those who prefer CMake.
#
#   make              tools (./main ./perplexity ./tokenize ./bench) and test binaries
#   make run          build and generate from the embedded default model
#   make test         build and run the CPU test suite (installs doctest-dev if missing)
#   make test-cuda    build the GPU test suite (run it where a GPU is)
#   make SANITIZE=1   ASan + UBSan build (in build-asan/)
#   make HIP=1        the GPU backend through hipcc for AMD GPUs (the default where hipcc is found
#                     and nvcc is not): objects in build-hip/, targets HIP_ARCH (default: the GPUs
#                     rocm_agent_enumerator lists, else gfx90a gfx1100); compiled and linked, not
#                     yet run on AMD hardware

CXX      ?= g++
NATIVE   ?= 1
SANITIZE ?= 0
CUDA     ?= auto
CUDA_ARCH ?= 80;86;89;90
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
HIPCC    ?= $(shell command -v hipcc 2>/dev/null)

# HIP: on when asked, or by default where hipcc is found and nvcc is not (and CUDA was not set)
HIP      ?= auto
ifeq ($(HIP),auto)
HIP      := $(if $(and $(filter auto,$(CUDA)),$(HIPCC),$(if $(NVCC),,yes)),1,0)
endif
ifeq ($(HIP),1)
ifeq ($(CUDA),1)
$(error CUDA=1 and HIP=1: one GPU backend per build)
endif
CUDA     := 0
BUILD    ?= build-hip
endif
BUILD    ?= build

ifeq ($(SANITIZE),1)
BUILD    := build-asan
endif

CXXFLAGS ?= -O2 -g
CXXFLAGS += -std=c++17 -Wall -Wextra -Wno-unused-parameter -pthread -MMD -MP
CPPFLAGS += -I. -Iinclude
LDLIBS   += -pthread -ldl
# NATIVE=x86-64-v3 (any -march value) builds for that CPU level, e.g. binaries built here to run
# on another machine.
ifeq ($(NATIVE),1)
CXXFLAGS += -march=native
else ifneq ($(NATIVE),0)
CXXFLAGS += -march=$(NATIVE)
endif
ifeq ($(SANITIZE),1)
CXXFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=address,undefined
endif

# ---- CUDA detection ---------------------------------------------------------------------------
ifeq ($(CUDA),auto)
ifneq ($(NVCC),)
CUDA := 1
else
CUDA := 0
endif
endif

LIB_SRCS := $(wildcard ggx/*.cpp) $(wildcard backends/cpu/*.cpp) $(wildcard exl2/*.cpp) \
            $(wildcard exl2/*/*.cpp) $(wildcard models/*.cpp)
CUDA_SRCS := $(wildcard backends/cuda/*.cu)
TOOL_COMMON := $(wildcard tools/common/*.cpp)
TOOLS    := main perplexity tokenize
# bench/ holds RESULTS.md, so the bench tool is built as bench/bench.
BENCH    := bench/bench
TEST_SRCS := $(filter-out tests/test-cuda%,$(wildcard tests/*.cpp))
CUDA_TEST_SRCS := $(wildcard tests/cuda/*.cpp) tests/test-main.cpp

ifeq ($(CUDA),1)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CPPFLAGS  += -DGGX_USE_CUDA -I$(CUDA_HOME)/include
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas
NVCC_GENCODE := $(foreach a,$(subst ;, ,$(CUDA_ARCH)),-gencode=arch=compute_$(a),code=sm_$(a))
NVCCFLAGS ?= -O3 -lineinfo
NVCCFLAGS += -std=c++17 $(NVCC_GENCODE) -Xcompiler -Wall,-Wextra,-Wno-unused-parameter -MMD -MP \
             --expt-relaxed-constexpr -I. -Iinclude -DGGX_USE_CUDA
LIB_OBJS  := $(LIB_SRCS:%.cpp=$(BUILD)/%.o) $(CUDA_SRCS:%.cu=$(BUILD)/%.cu.o)
else
LIB_OBJS  := $(LIB_SRCS:%.cpp=$(BUILD)/%.o)
endif

# HIP: the same backends/cuda/*.cu through hipcc and backends/hip/hip-compat.h, linked with
# libamdhip64; the GPU suite's host files too (they include the compatibility header).
ifeq ($(HIP),1)
HIP_LIB_DIR := $(BUILD)/device-lib
include backends/hip/hip.mk
CPPFLAGS  += -DGGX_USE_CUDA -DGGX_USE_HIP -D__HIP_PLATFORM_AMD__
LDLIBS    += -lamdhip64
LIB_OBJS  += $(CUDA_SRCS:%.cu=$(BUILD)/%.hip.o)
endif

LIB := $(BUILD)/libexl2.a

.PHONY: all tools tests run test test-cuda clean info
all: info tools tests

info:
	@echo "exl2: C++ $(shell $(CXX) -dumpfullversion 2>/dev/null) | native=$(NATIVE) | sanitize=$(SANITIZE) | \
cuda=$(if $(filter 1,$(CUDA)),yes ($(CUDA_ARCH)),no) | \
hip=$(if $(filter 1,$(HIP)),yes ($(HIP_ARCH)),$(if $(HIPCC),no (hipcc found: make HIP=1),no))"

tools: $(TOOLS) $(BENCH)
tests: $(BUILD)/test-exl2 $(BUILD)/c-header-check.o $(if $(filter 1,$(CUDA) $(HIP)),$(BUILD)/test-cuda,)

# The public header compiles as plain C.
$(BUILD)/c-header-check.o: tests/c-header.c include/exl2.h
	@mkdir -p $(dir $@)
	$(CC) -std=c99 -Wall -Wextra -pedantic -Werror -Iinclude -c $< -o $@

$(LIB): $(LIB_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

# Make does not see flags: in one BUILD folder, `make CUDA=0` then `make` would link the objects
# built without the CUDA backend (and `--device cuda` would say it is not compiled in). Every
# object depends on $(BUILD)/flags, rewritten only when the configuration changes; the tools at
# the top, shared by all BUILD folders, depend on .tools-build, which names the folder and flags
# they were linked from.
FLAGS_NOW := $(CXX) $(CPPFLAGS) $(CXXFLAGS) | $(NVCC) $(NVCCFLAGS) | $(HIP_FLAGS) | $(LDFLAGS) $(LDLIBS)
FLAGS_STAMP := $(BUILD)/flags
TOOLS_STAMP := .tools-build
.PHONY: FORCE
$(FLAGS_STAMP): FORCE
	@mkdir -p $(@D)
	@[ "$$(cat $@ 2>/dev/null)" = '$(FLAGS_NOW)' ] || printf '%s\n' '$(FLAGS_NOW)' > $@
$(TOOLS_STAMP): FORCE
	@[ "$$(cat $@ 2>/dev/null)" = '$(BUILD) $(FLAGS_NOW)' ] || printf '%s\n' '$(BUILD) $(FLAGS_NOW)' > $@

$(BUILD)/%.o: %.cpp $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/%.hip.o: %.cu $(FLAGS_STAMP) | $(HIP_ISA_FILES)
	@mkdir -p $(dir $@)
	$(HIPCC) $(HIP_FLAGS) -I. -Iinclude -MMD -MP -x hip -c $< -o $@

ifeq ($(HIP),1)
$(BUILD)/tests/cuda/%.o: tests/cuda/%.cpp $(FLAGS_STAMP) | $(HIP_ISA_FILES)
	@mkdir -p $(dir $@)
	$(HIPCC) $(HIP_FLAGS) $(CPPFLAGS) -MMD -MP -x hip -c $< -o $@
endif

$(TOOLS): %: $(BUILD)/tools/%.o $(TOOL_COMMON:%.cpp=$(BUILD)/%.o) $(LIB) $(TOOLS_STAMP)
	$(CXX) $(LDFLAGS) $(filter-out $(TOOLS_STAMP),$^) $(LDLIBS) -o $@

$(BENCH): $(BUILD)/tools/bench.o $(TOOL_COMMON:%.cpp=$(BUILD)/%.o) $(LIB) $(TOOLS_STAMP)
	$(CXX) $(LDFLAGS) $(filter-out $(TOOLS_STAMP),$^) $(LDLIBS) -o $@

$(BUILD)/test-exl2: $(TEST_SRCS:%.cpp=$(BUILD)/%.o) $(LIB)
	$(CXX) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/test-cuda: $(CUDA_TEST_SRCS:%.cpp=$(BUILD)/%.o) $(LIB)
	$(CXX) $(LDFLAGS) $^ $(LDLIBS) -o $@

# doctest comes from Debian's doctest-dev; install it when missing and we are root.
DOCTEST_H := /usr/include/doctest/doctest.h
$(DOCTEST_H):
	@if [ "$$(id -u)" = 0 ]; then (apt-get install -y -qq doctest-dev >/dev/null 2>&1 || \
	  (apt-get update -qq >/dev/null && apt-get install -y -qq doctest-dev >/dev/null)); \
	else echo "doctest missing: sudo apt-get install doctest-dev"; exit 1; fi

$(TEST_SRCS:%.cpp=$(BUILD)/%.o) $(CUDA_TEST_SRCS:%.cpp=$(BUILD)/%.o): | $(DOCTEST_H)

run: main
	./main -m models/kjv-6m -p "In the beginning" -n 64

# Runs the CPU suite; prints doctest's summary and a plain "N passed, N failed" line.
test: $(BUILD)/test-exl2 tools
	@set -o pipefail; ./$(BUILD)/test-exl2 $(TEST_ARGS) 2>&1 | tee $(BUILD)/test.log; rc=$$?; \
	awk -F'|' '/test cases:/ { gsub(/[^0-9]/,"",$$2); gsub(/[^0-9]/,"",$$3); gsub(/[^0-9]/,"",$$4); \
	  printf "%s passed, %s failed, %s skipped\n", $$2, $$3, $$4 }' $(BUILD)/test.log; exit $$rc

test-cuda: $(BUILD)/test-cuda

# CPU packed-weight matmul benchmark (bench/qmatmul-cpu.cpp): make bench-qmatmul-cpu
.PHONY: bench-qmatmul-cpu
bench-qmatmul-cpu: $(BUILD)/bench-qmatmul-cpu
$(BUILD)/bench-qmatmul-cpu: $(BUILD)/bench/qmatmul-cpu.o $(LIB)
	$(CXX) $(LDFLAGS) $^ $(LDLIBS) -o $@

# Host sampling time per token (bench/sampler-cpu.cpp): make bench-sampler-cpu
.PHONY: bench-sampler-cpu
bench-sampler-cpu: $(BUILD)/bench-sampler-cpu
$(BUILD)/bench-sampler-cpu: $(BUILD)/bench/sampler-cpu.o $(LIB)
	$(CXX) $(LDFLAGS) $^ $(LDLIBS) -o $@

# The CUDA decode GEMV's launch plan for synthetic models, on the host (bench/plan-report.cpp):
# make CUDA=1 bench-plan-report
.PHONY: bench-plan-report
ifeq ($(CUDA),1)
bench-plan-report: $(BUILD)/bench-plan-report
$(BUILD)/bench-plan-report: $(BUILD)/bench/plan-report.o $(LIB)
	$(CXX) $(LDFLAGS) $^ $(LDLIBS) -o $@
else
bench-plan-report:
	@echo "bench-plan-report needs the CUDA backend's host code: make CUDA=1 bench-plan-report" >&2; exit 1
endif

clean:
	rm -rf build build-asan build-hip $(TOOLS) $(BENCH) $(TOOLS_STAMP)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
SHELL := /bin/bash
