/* What GPU, if any, this process can use. */
#ifndef CATCHAT_DEVICE_H
#define CATCHAT_DEVICE_H

/* Number of usable CUDA devices (0 when there is no driver or no GPU). */
int cc_gpu_count(void);
/* Exit code meaning "skipped: no GPU" for CTest (SKIP_RETURN_CODE) and automake. */
#define CC_EXIT_SKIP 77

#endif
