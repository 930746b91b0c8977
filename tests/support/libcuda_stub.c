/* TEST SUPPORT ONLY - never shipped.
 * cuDNN's runtime-compiled engine library links against libcuda.so.1 and imports exactly these six
 * driver symbols. On a machine without an NVIDIA driver, cuDNN then fails every Finalize with
 * SUBLIBRARY_LOADING_FAILED. Preloading this stub (soname libcuda.so.1) lets descriptor-level tests
 * run on CPU-only CI; every entry point reports CUDA_ERROR_NO_DEVICE (100). */
typedef int CUresult;
#define CUDA_ERROR_NO_DEVICE 100
CUresult cuGetErrorString(int error, const char **str) { static const char m[] = "stub libcuda: no device"; if (str) *str = m; return 0; }
CUresult cuModuleGetFunction(void *f, void *m, const char *name) { return CUDA_ERROR_NO_DEVICE; }
CUresult cuModuleLoadData(void *m, const void *image) { return CUDA_ERROR_NO_DEVICE; }
CUresult cuModuleUnload(void *m) { return CUDA_ERROR_NO_DEVICE; }
CUresult cuTensorMapEncodeIm2col(void) { return CUDA_ERROR_NO_DEVICE; }
CUresult cuTensorMapEncodeTiled(void) { return CUDA_ERROR_NO_DEVICE; }
