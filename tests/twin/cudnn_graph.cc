// cudnn_graph.cc (GPU twin) - cuDNN 9's graph (backend) API for ddptrain's convolutions
// (/work contract: docs/gpu.md). First version: every call answers CUDNN_STATUS_NOT_SUPPORTED.
#include "cudnn.h"

extern "C" {

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t,
                                           cudnnBackendDescriptor_t *d)
{
    if (d)
        *d = nullptr;
    return CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t)
{
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t)
{
    return CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, const void *)
{
    return CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, int64_t *, void *)
{
    return CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t)
{
    return CUDNN_STATUS_NOT_SUPPORTED;
}
}
