# What a HIP build of backends/cuda/*.cu needs: hipcc, the target list and ROCm's device library.
# Included by the top Makefile (make HIP=1: the tools and the GPU suite) and by
# backends/hip/Makefile (the backend alone, as a static library). The includer sets HIP_LIB_DIR,
# a folder of its build tree for the device-library overlay below.
#
# Debian bookworm's ROCm 5.2 device library predates RDNA3: of its files, only the one that names
# the ISA version (oclc_isa_version_1100.bc, a single constant, 11000) is missing for gfx1100, and
# clang refuses the target without it. For each HIP_ARCH whose file is missing, the build writes
# it with the clang hipcc uses (major x 1000 + minor x 100 + stepping, the value the library's own
# files hold: 9010 for gfx90a, 10300 for gfx1030) into $(HIP_LIB_DIR), beside links to the rest
# of the library. The math library itself (ocml, ockl) is then 5.2's, compiled for gfx11 by
# clang 15; a ROCm that ships the file is used as it is.
HIPCC    ?= hipcc
# the GPUs of this machine when ROCm lists any (gfx000 is the CPU agent), else CDNA2 and RDNA3
ifeq ($(origin HIP_ARCH),undefined)
HIP_ARCH := $(or $(sort $(filter-out gfx000,$(shell rocm_agent_enumerator 2>/dev/null))),gfx90a gfx1100)
endif
ROCM_DEVICE_LIB_PATH ?= $(firstword $(wildcard /opt/rocm/amdgcn/bitcode /usr/lib/x86_64-linux-gnu/amdgcn/bitcode))
HIP_DEVICE_CLANG ?= $(firstword $(shell command -v clang-15 clang 2>/dev/null))

# the arches whose ISA-version file the library lacks, and the library the compiles then read
hip_missing_isa := $(if $(ROCM_DEVICE_LIB_PATH),$(foreach a,$(HIP_ARCH),$(if $(wildcard \
                     $(ROCM_DEVICE_LIB_PATH)/oclc_isa_version_$(patsubst gfx%,%,$(a)).bc),,$(a))))
HIP_DEVICE_LIB := $(if $(hip_missing_isa),$(HIP_LIB_DIR),$(ROCM_DEVICE_LIB_PATH))
HIP_ISA_FILES  := $(foreach a,$(hip_missing_isa),$(HIP_LIB_DIR)/oclc_isa_version_$(patsubst gfx%,%,$(a)).bc)
HIP_FLAGS := -std=c++17 -O2 -Wall -DGGX_USE_HIP -DGGX_USE_CUDA $(addprefix --offload-arch=,$(HIP_ARCH)) \
             $(if $(HIP_DEVICE_LIB),--rocm-device-lib-path=$(HIP_DEVICE_LIB))

# gfxMmS (gfx1100, gfx90a: the last two characters are minor and stepping, in hex) -> its
# __oclc_ISA_version
hip_isa_version = $(shell a=$(patsubst gfx%,%,$(1)); echo $$(( $$(echo $$a | sed 's/..$$//') * 1000 + \
                    0x$$(echo $$a | sed 's/.*\(.\).$$/\1/') * 100 + 0x$$(echo $$a | sed 's/.*\(.\)$$/\1/') )))

.SECONDARY: $(HIP_ISA_FILES)
$(HIP_LIB_DIR)/oclc_isa_version_%.bc:
	@mkdir -p $(@D)
	@[ -n "$(HIP_DEVICE_CLANG)" ] || { echo "hip: error: no clang-15 to write $(@F) (ROCm's device library lacks it)" >&2; exit 1; }
	@for f in $(ROCM_DEVICE_LIB_PATH)/*.bc; do ln -sf "$$f" $(@D)/; done
	printf 'const unsigned int __oclc_ISA_version __attribute__((visibility("protected"))) = %s;\n' \
	    $(call hip_isa_version,gfx$*) | $(HIP_DEVICE_CLANG) -x c -target amdgcn-amd-amdhsa -nogpulib -O2 -emit-llvm -c - -o $@
