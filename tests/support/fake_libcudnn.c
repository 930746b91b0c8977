/* TEST SUPPORT ONLY - never shipped. A fake libcudnn.so.9 that exports the four symbols the loader vets.
 * -DCRASH_IN_CUDART: cudnnGetCudartVersion dies of SIGSEGV; -DVERSION=8907: reports that version. */
#include <stddef.h>
#ifndef VERSION
#define VERSION 92800
#endif
size_t cudnnGetVersion(void) { return VERSION; }
size_t cudnnGetCudartVersion(void) {
#ifdef CRASH_IN_CUDART
    *(volatile int *)0 = 0;
#endif
    return 12090;
}
int cudnnGraphVersionCheck(void) { return 0; }
int cudnnBackendCreateDescriptor(int type, void **desc) { return 2000; }
