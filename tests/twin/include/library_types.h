/*
 * library_types.h (GPU twin) - the data types of cuBLAS's mixed-precision calls (GemmEx), with
 * CUDA's values.
 */
#ifndef DDP_TWIN_LIBRARY_TYPES_H
#define DDP_TWIN_LIBRARY_TYPES_H

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16F = 2,
    CUDA_R_16BF = 14
} cudaDataType;

#endif
