/*
 * fragprobe: a subset of the CUDA 12.8 runtime API header, enough for the scenario programs
 * in cuda/scenarios. Names, types and values are those of NVIDIA's cuda_runtime_api.h and
 * driver_types.h, so a program that compiles against this file compiles unchanged against
 * the real toolkit (cc -I$CUDA_HOME/include ... -L$CUDA_HOME/lib64 -lcudart).
 * Written for fragprobe from the public CUDA runtime API documentation.
 */
#ifndef FRAGPROBE_CUDA_RUNTIME_API_H
#define FRAGPROBE_CUDA_RUNTIME_API_H

#include <stddef.h>

#define CUDART_VERSION 12080
#define CUDARTAPI

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorCudartUnloading = 4,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorDeviceUninitialized = 201,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorSymbolNotFound = 500,
    cudaErrorNotReady = 600,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999
} cudaError_t;

typedef struct CUstream_st *cudaStream_t;
typedef struct CUmemPoolHandle_st *cudaMemPool_t;

#define cudaMemAttachGlobal 0x01
#define cudaMemAttachHost 0x02

enum cudaMemPoolAttr {
    cudaMemPoolReuseFollowEventDependencies = 0x1,
    cudaMemPoolReuseAllowOpportunistic = 0x2,
    cudaMemPoolReuseAllowInternalDependencies = 0x3,
    cudaMemPoolAttrReleaseThreshold = 0x4,
    cudaMemPoolAttrReservedMemCurrent = 0x5,
    cudaMemPoolAttrReservedMemHigh = 0x6,
    cudaMemPoolAttrUsedMemCurrent = 0x7,
    cudaMemPoolAttrUsedMemHigh = 0x8
};

#define cudaEnableDefault 0x0
#define cudaEnableLegacyStream 0x1
#define cudaEnablePerThreadDefaultStream 0x2

enum cudaDriverEntryPointQueryResult {
    cudaDriverEntryPointSuccess = 0,
    cudaDriverEntryPointSymbolNotFound = 1,
    cudaDriverEntryPointVersionNotSufficent = 2
};

cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size);
cudaError_t CUDARTAPI cudaFree(void *devPtr);
cudaError_t CUDARTAPI cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height);
cudaError_t CUDARTAPI cudaMallocManaged(void **devPtr, size_t size, unsigned int flags);
cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t CUDARTAPI cudaFreeAsync(void *devPtr, cudaStream_t hStream);
cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream);
cudaError_t CUDARTAPI cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t CUDARTAPI cudaGetDeviceCount(int *count);
cudaError_t CUDARTAPI cudaSetDevice(int device);
cudaError_t CUDARTAPI cudaGetDevice(int *device);
cudaError_t CUDARTAPI cudaDeviceSynchronize(void);
cudaError_t CUDARTAPI cudaGetLastError(void);
cudaError_t CUDARTAPI cudaPeekAtLastError(void);
const char *CUDARTAPI cudaGetErrorString(cudaError_t error);
const char *CUDARTAPI cudaGetErrorName(cudaError_t error);
cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream);
cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream);
cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream);
cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device);
cudaError_t CUDARTAPI cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep);
cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtimeVersion);
cudaError_t CUDARTAPI cudaDriverGetVersion(int *driverVersion);
cudaError_t CUDARTAPI cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus);

#ifdef __cplusplus
}
#endif

#endif
