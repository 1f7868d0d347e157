//! Result codes of the driver API (`CUresult`), the runtime API (`cudaError_t`) and NVML
//! (`nvmlReturn_t`), with the values, names and messages of the real headers.
//!
//! Codes cross the C boundary as plain integers, never as Rust enums.

/// A failed driver call: the `CUresult` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CuError(pub u32);

pub type CuResult<T> = Result<T, CuError>;

pub const CUDA_SUCCESS: u32 = 0;
pub const CUDA_ERROR_INVALID_VALUE: u32 = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: u32 = 3;
pub const CUDA_ERROR_NO_DEVICE: u32 = 100;
pub const CUDA_ERROR_INVALID_DEVICE: u32 = 101;
pub const CUDA_ERROR_INVALID_CONTEXT: u32 = 201;
pub const CUDA_ERROR_OPERATING_SYSTEM: u32 = 304;
pub const CUDA_ERROR_INVALID_HANDLE: u32 = 400;
pub const CUDA_ERROR_ILLEGAL_STATE: u32 = 401;
pub const CUDA_ERROR_NOT_FOUND: u32 = 500;
pub const CUDA_ERROR_NOT_READY: u32 = 600;
pub const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: u32 = 704;
pub const CUDA_ERROR_PEER_ACCESS_NOT_ENABLED: u32 = 705;
pub const CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE: u32 = 708;
pub const CUDA_ERROR_CONTEXT_IS_DESTROYED: u32 = 709;
pub const CUDA_ERROR_NOT_SUPPORTED: u32 = 801;
pub const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: u32 = 900;
pub const CUDA_ERROR_UNKNOWN: u32 = 999;

impl CuError {
    pub const INVALID_VALUE: CuError = CuError(CUDA_ERROR_INVALID_VALUE);
    pub const OUT_OF_MEMORY: CuError = CuError(CUDA_ERROR_OUT_OF_MEMORY);
    pub const NOT_INITIALIZED: CuError = CuError(CUDA_ERROR_NOT_INITIALIZED);
    pub const NO_DEVICE: CuError = CuError(CUDA_ERROR_NO_DEVICE);
    pub const INVALID_DEVICE: CuError = CuError(CUDA_ERROR_INVALID_DEVICE);
    pub const INVALID_CONTEXT: CuError = CuError(CUDA_ERROR_INVALID_CONTEXT);
    pub const INVALID_HANDLE: CuError = CuError(CUDA_ERROR_INVALID_HANDLE);
    pub const NOT_FOUND: CuError = CuError(CUDA_ERROR_NOT_FOUND);
    pub const CONTEXT_IS_DESTROYED: CuError = CuError(CUDA_ERROR_CONTEXT_IS_DESTROYED);
    pub const NOT_SUPPORTED: CuError = CuError(CUDA_ERROR_NOT_SUPPORTED);
}

/// Collapses a driver result to its integer code.
pub fn code_of(r: CuResult<()>) -> u32 {
    match r {
        Ok(()) => CUDA_SUCCESS,
        Err(CuError(c)) => c,
    }
}

/// (value, name, message) of every `CUresult` of CUDA 12.8. Names and messages are the
/// strings `cuGetErrorName`/`cuGetErrorString` return; NUL-terminated for C callers.
pub const DRIVER_CODES: &[(u32, &str, &str)] = &[
    (0, "CUDA_SUCCESS\0", "no error\0"),
    (1, "CUDA_ERROR_INVALID_VALUE\0", "invalid argument\0"),
    (2, "CUDA_ERROR_OUT_OF_MEMORY\0", "out of memory\0"),
    (3, "CUDA_ERROR_NOT_INITIALIZED\0", "initialization error\0"),
    (4, "CUDA_ERROR_DEINITIALIZED\0", "driver shutting down\0"),
    (5, "CUDA_ERROR_PROFILER_DISABLED\0", "profiler disabled while using external profiling tool\0"),
    (6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED\0", "profiler not initialized: call cudaProfilerInitialize()\0"),
    (7, "CUDA_ERROR_PROFILER_ALREADY_STARTED\0", "profiler already started\0"),
    (8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED\0", "profiler already stopped\0"),
    (34, "CUDA_ERROR_STUB_LIBRARY\0", "CUDA driver is a stub library\0"),
    (46, "CUDA_ERROR_DEVICE_UNAVAILABLE\0", "CUDA-capable device(s) is/are busy or unavailable\0"),
    (100, "CUDA_ERROR_NO_DEVICE\0", "no CUDA-capable device is detected\0"),
    (101, "CUDA_ERROR_INVALID_DEVICE\0", "invalid device ordinal\0"),
    (102, "CUDA_ERROR_DEVICE_NOT_LICENSED\0", "device doesn't have valid Grid license\0"),
    (200, "CUDA_ERROR_INVALID_IMAGE\0", "device kernel image is invalid\0"),
    (201, "CUDA_ERROR_INVALID_CONTEXT\0", "invalid device context\0"),
    (202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT\0", "context already current\0"),
    (205, "CUDA_ERROR_MAP_FAILED\0", "mapping of buffer object failed\0"),
    (206, "CUDA_ERROR_UNMAP_FAILED\0", "unmapping of buffer object failed\0"),
    (207, "CUDA_ERROR_ARRAY_IS_MAPPED\0", "array is mapped\0"),
    (208, "CUDA_ERROR_ALREADY_MAPPED\0", "resource already mapped\0"),
    (209, "CUDA_ERROR_NO_BINARY_FOR_GPU\0", "no kernel image is available for execution on the device\0"),
    (210, "CUDA_ERROR_ALREADY_ACQUIRED\0", "resource already acquired\0"),
    (211, "CUDA_ERROR_NOT_MAPPED\0", "resource not mapped\0"),
    (212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY\0", "resource not mapped as array\0"),
    (213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER\0", "resource not mapped as pointer\0"),
    (214, "CUDA_ERROR_ECC_UNCORRECTABLE\0", "uncorrectable ECC error encountered\0"),
    (215, "CUDA_ERROR_UNSUPPORTED_LIMIT\0", "limit is not supported on this architecture\0"),
    (216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE\0", "exclusive-thread device already in use by a different thread\0"),
    (217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED\0", "peer access is not supported between these two devices\0"),
    (218, "CUDA_ERROR_INVALID_PTX\0", "a PTX JIT compilation failed\0"),
    (219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT\0", "invalid OpenGL or DirectX context\0"),
    (220, "CUDA_ERROR_NVLINK_UNCORRECTABLE\0", "uncorrectable NVLink error detected during the execution\0"),
    (221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND\0", "PTX JIT compiler library not found\0"),
    (222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION\0", "the provided PTX was compiled with an unsupported toolchain.\0"),
    (223, "CUDA_ERROR_JIT_COMPILATION_DISABLED\0", "PTX JIT compilation was disabled\0"),
    (224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY\0", "the provided execution affinity is not supported\0"),
    (225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC\0", "the provided PTX contains unsupported call to cudaDeviceSynchronize\0"),
    (300, "CUDA_ERROR_INVALID_SOURCE\0", "device kernel image is invalid\0"),
    (301, "CUDA_ERROR_FILE_NOT_FOUND\0", "file not found\0"),
    (302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND\0", "shared object symbol not found\0"),
    (303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED\0", "shared object initialization failed\0"),
    (304, "CUDA_ERROR_OPERATING_SYSTEM\0", "OS call failed or operation not supported on this OS\0"),
    (400, "CUDA_ERROR_INVALID_HANDLE\0", "invalid resource handle\0"),
    (401, "CUDA_ERROR_ILLEGAL_STATE\0", "the operation cannot be performed in the present state\0"),
    (402, "CUDA_ERROR_LOSSY_QUERY\0", "attempted introspection would be semantically lossy\0"),
    (500, "CUDA_ERROR_NOT_FOUND\0", "named symbol not found\0"),
    (600, "CUDA_ERROR_NOT_READY\0", "device not ready\0"),
    (700, "CUDA_ERROR_ILLEGAL_ADDRESS\0", "an illegal memory access was encountered\0"),
    (701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES\0", "too many resources requested for launch\0"),
    (702, "CUDA_ERROR_LAUNCH_TIMEOUT\0", "the launch timed out and was terminated\0"),
    (703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING\0", "launch uses incompatible texturing mode\0"),
    (704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED\0", "peer access is already enabled\0"),
    (705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED\0", "peer access has not been enabled\0"),
    (708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE\0", "cannot set while device is active in this process\0"),
    (709, "CUDA_ERROR_CONTEXT_IS_DESTROYED\0", "context is destroyed\0"),
    (710, "CUDA_ERROR_ASSERT\0", "device-side assert triggered\0"),
    (711, "CUDA_ERROR_TOO_MANY_PEERS\0", "peer mapping resources exhausted\0"),
    (712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED\0", "part or all of the requested memory range is already mapped\0"),
    (713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED\0", "pointer does not correspond to a registered memory region\0"),
    (714, "CUDA_ERROR_HARDWARE_STACK_ERROR\0", "hardware stack error\0"),
    (715, "CUDA_ERROR_ILLEGAL_INSTRUCTION\0", "an illegal instruction was encountered\0"),
    (716, "CUDA_ERROR_MISALIGNED_ADDRESS\0", "misaligned address\0"),
    (717, "CUDA_ERROR_INVALID_ADDRESS_SPACE\0", "operation not supported on global/shared address space\0"),
    (718, "CUDA_ERROR_INVALID_PC\0", "invalid program counter\0"),
    (719, "CUDA_ERROR_LAUNCH_FAILED\0", "unspecified launch failure\0"),
    (720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE\0", "too many blocks in cooperative launch\0"),
    (800, "CUDA_ERROR_NOT_PERMITTED\0", "operation not permitted\0"),
    (801, "CUDA_ERROR_NOT_SUPPORTED\0", "operation not supported\0"),
    (802, "CUDA_ERROR_SYSTEM_NOT_READY\0", "system not yet initialized\0"),
    (803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH\0", "system has unsupported display driver / cuda driver combination\0"),
    (804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE\0", "forward compatibility was attempted on non supported HW\0"),
    (805, "CUDA_ERROR_MPS_CONNECTION_FAILED\0", "MPS client failed to connect to the MPS control daemon or the MPS server\0"),
    (806, "CUDA_ERROR_MPS_RPC_FAILURE\0", "the remote procedural call between the MPS server and the MPS client failed\0"),
    (807, "CUDA_ERROR_MPS_SERVER_NOT_READY\0", "MPS server is not ready to accept new MPS client requests\0"),
    (808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED\0", "the hardware resources required to create MPS client have been exhausted\0"),
    (809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED\0", "the hardware resources required to support device connections have been exhausted\0"),
    (810, "CUDA_ERROR_MPS_CLIENT_TERMINATED\0", "the MPS client has been terminated by the server\0"),
    (811, "CUDA_ERROR_CDP_NOT_SUPPORTED\0", "is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it\0"),
    (812, "CUDA_ERROR_CDP_VERSION_MISMATCH\0", "unsupported interaction between different versions of CUDA Dynamic Parallelism\0"),
    (900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED\0", "operation not permitted when stream is capturing\0"),
    (901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED\0", "operation failed due to a previous error during capture\0"),
    (902, "CUDA_ERROR_STREAM_CAPTURE_MERGE\0", "operation would result in a merge of separate capture sequences\0"),
    (903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED\0", "capture was not ended in the same stream as it began\0"),
    (904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED\0", "capturing stream has unjoined work\0"),
    (905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION\0", "dependency created on uncaptured work in another stream\0"),
    (906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT\0", "operation would make the legacy stream depend on a capturing blocking stream\0"),
    (907, "CUDA_ERROR_CAPTURED_EVENT\0", "operation not permitted on an event last recorded in a capturing stream\0"),
    (908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD\0", "attempt to terminate a thread-local capture sequence from another thread\0"),
    (909, "CUDA_ERROR_TIMEOUT\0", "wait operation timed out\0"),
    (910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE\0", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update\0"),
    (911, "CUDA_ERROR_EXTERNAL_DEVICE\0", "an async error has occured in external entity outside of CUDA\0"),
    (912, "CUDA_ERROR_INVALID_CLUSTER_SIZE\0", "a kernel launch error has occurred due to cluster misconfiguration\0"),
    (913, "CUDA_ERROR_FUNCTION_NOT_LOADED\0", "the function handle is not loaded when calling an API that requires a loaded function\0"),
    (914, "CUDA_ERROR_INVALID_RESOURCE_TYPE\0", "one or more resources passed in are not valid resource types for the operation\0"),
    (915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION\0", "one or more resources are insufficient or non-applicable for the operation\0"),
    (999, "CUDA_ERROR_UNKNOWN\0", "unknown error\0"),
];

/// NUL-terminated name and message of a `CUresult`, `None` for a value that is not one.
pub fn driver_code(code: u32) -> Option<(&'static str, &'static str)> {
    DRIVER_CODES
        .binary_search_by_key(&code, |&(c, _, _)| c)
        .ok()
        .map(|i| (DRIVER_CODES[i].1, DRIVER_CODES[i].2))
}

pub const CUDA_RT_SUCCESS: u32 = 0;
pub const CUDA_RT_ERROR_INVALID_VALUE: u32 = 1;
pub const CUDA_RT_ERROR_MEMORY_ALLOCATION: u32 = 2;
pub const CUDA_RT_ERROR_INITIALIZATION: u32 = 3;
pub const CUDA_RT_ERROR_INSUFFICIENT_DRIVER: u32 = 35;
pub const CUDA_RT_ERROR_NO_DEVICE: u32 = 100;
pub const CUDA_RT_ERROR_INVALID_DEVICE: u32 = 101;
pub const CUDA_RT_ERROR_INVALID_RESOURCE_HANDLE: u32 = 400;
pub const CUDA_RT_ERROR_SYMBOL_NOT_FOUND: u32 = 500;
pub const CUDA_RT_ERROR_NOT_SUPPORTED: u32 = 801;
pub const CUDA_RT_ERROR_UNKNOWN: u32 = 999;

/// (value, name, message) of the `cudaError_t` values the runtime stand-in can return.
pub const RUNTIME_CODES: &[(u32, &str, &str)] = &[
    (0, "cudaSuccess\0", "no error\0"),
    (1, "cudaErrorInvalidValue\0", "invalid argument\0"),
    (2, "cudaErrorMemoryAllocation\0", "out of memory\0"),
    (
        3,
        "cudaErrorInitializationError\0",
        "initialization error\0",
    ),
    (4, "cudaErrorCudartUnloading\0", "driver shutting down\0"),
    (
        34,
        "cudaErrorStubLibrary\0",
        "CUDA driver is a stub library\0",
    ),
    (
        35,
        "cudaErrorInsufficientDriver\0",
        "CUDA driver version is insufficient for CUDA runtime version\0",
    ),
    (
        46,
        "cudaErrorDevicesUnavailable\0",
        "CUDA-capable device(s) is/are busy or unavailable\0",
    ),
    (
        100,
        "cudaErrorNoDevice\0",
        "no CUDA-capable device is detected\0",
    ),
    (101, "cudaErrorInvalidDevice\0", "invalid device ordinal\0"),
    (
        201,
        "cudaErrorDeviceUninitialized\0",
        "invalid device context\0",
    ),
    (
        400,
        "cudaErrorInvalidResourceHandle\0",
        "invalid resource handle\0",
    ),
    (500, "cudaErrorSymbolNotFound\0", "named symbol not found\0"),
    (600, "cudaErrorNotReady\0", "device not ready\0"),
    (
        708,
        "cudaErrorSetOnActiveProcess\0",
        "cannot set while device is active in this process\0",
    ),
    (
        709,
        "cudaErrorContextIsDestroyed\0",
        "context is destroyed\0",
    ),
    (801, "cudaErrorNotSupported\0", "operation not supported\0"),
    (999, "cudaErrorUnknown\0", "unknown error\0"),
];

/// NUL-terminated name and message of a `cudaError_t`.
pub fn runtime_code(code: u32) -> Option<(&'static str, &'static str)> {
    RUNTIME_CODES
        .binary_search_by_key(&code, |&(c, _, _)| c)
        .ok()
        .map(|i| (RUNTIME_CODES[i].1, RUNTIME_CODES[i].2))
}

/// The `cudaError_t` the runtime reports for a driver failure.
pub fn runtime_from_driver(code: u32) -> u32 {
    match code {
        0 => CUDA_RT_SUCCESS,
        CUDA_ERROR_OUT_OF_MEMORY => CUDA_RT_ERROR_MEMORY_ALLOCATION,
        CUDA_ERROR_NOT_INITIALIZED => CUDA_RT_ERROR_INITIALIZATION,
        c if runtime_code(c).is_some() => c,
        _ => CUDA_RT_ERROR_UNKNOWN,
    }
}

pub const NVML_SUCCESS: u32 = 0;
pub const NVML_ERROR_UNINITIALIZED: u32 = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: u32 = 2;
pub const NVML_ERROR_NOT_SUPPORTED: u32 = 3;
pub const NVML_ERROR_NO_PERMISSION: u32 = 4;
pub const NVML_ERROR_NOT_FOUND: u32 = 6;
pub const NVML_ERROR_INSUFFICIENT_SIZE: u32 = 7;
pub const NVML_ERROR_DRIVER_NOT_LOADED: u32 = 9;
pub const NVML_ERROR_FUNCTION_NOT_FOUND: u32 = 13;
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: u32 = 25;
pub const NVML_ERROR_UNKNOWN: u32 = 999;

/// (value, message) of `nvmlReturn_t`, as `nvmlErrorString` returns them.
pub const NVML_CODES: &[(u32, &str)] = &[
    (0, "Success\0"),
    (1, "Uninitialized\0"),
    (2, "Invalid Argument\0"),
    (3, "Not Supported\0"),
    (4, "Insufficient Permissions\0"),
    (5, "Already Initialized\0"),
    (6, "Not Found\0"),
    (7, "Insufficient Size\0"),
    (8, "Insufficient External Power\0"),
    (9, "Driver Not Loaded\0"),
    (10, "Timeout\0"),
    (11, "Interrupted by IRQ\0"),
    (12, "NVML Shared Library Not Found\0"),
    (13, "Function Not Found\0"),
    (14, "Corrupted infoROM\0"),
    (15, "GPU is lost\0"),
    (16, "GPU requires restart\0"),
    (17, "Operating System Call Failed\0"),
    (18, "RM has detected an NVML/RM version mismatch\0"),
    (19, "In use by another client\0"),
    (20, "Memory Error\0"),
    (21, "No Data\0"),
    (22, "vGPU ECC Not Supported\0"),
    (23, "Insufficient Resources\0"),
    (24, "Freq Not Supported\0"),
    (25, "Argument Version Mismatch\0"),
    (26, "Deprecated\0"),
    (27, "Not Ready\0"),
    (28, "GPU Not Found\0"),
    (29, "Invalid State\0"),
    (30, "Reset Type Not Supported\0"),
    (999, "Unknown Error\0"),
];

pub fn nvml_message(code: u32) -> &'static str {
    NVML_CODES
        .binary_search_by_key(&code, |&(c, _)| c)
        .map(|i| NVML_CODES[i].1)
        .unwrap_or("Unknown Error\0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_sorted_and_terminated() {
        for t in [DRIVER_CODES, RUNTIME_CODES] {
            assert!(t.windows(2).all(|w| w[0].0 < w[1].0));
            assert!(t
                .iter()
                .all(|(_, n, m)| n.ends_with('\0') && m.ends_with('\0')));
        }
        assert!(NVML_CODES.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(driver_code(2).unwrap().0, "CUDA_ERROR_OUT_OF_MEMORY\0");
        assert_eq!(driver_code(12345), None);
        assert_eq!(runtime_code(2).unwrap().0, "cudaErrorMemoryAllocation\0");
        assert_eq!(runtime_from_driver(2), 2);
        assert_eq!(runtime_from_driver(3), 3);
        assert_eq!(runtime_from_driver(700), 999);
    }
}
