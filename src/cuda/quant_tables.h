// Lookup tables of the IQ formats on the device (quant/iq_grids.h: the grids,
// the sign table and the IQ4 levels). Every kernel file that decodes an IQ
// format keeps its own device copy (quant_sub32_iq.cuh: no relocatable device
// code) and registers an uploader here.
//
// CUDA-only header (host code).
#pragma once

namespace ms::cuda {

// Copies the tables to the current device for every kernel file that reads
// them (once per file and device; later calls return at once). Launchers of
// IQ kernels do this on first use, but not inside a CUDA graph capture (they
// throw there): call this before capturing.
void prepare_quant_tables();

namespace detail {
using TableUploader = void (*)();
// Adds an uploader that prepare_quant_tables() calls; returns true.
bool register_table_uploader(TableUploader up);
}  // namespace detail

}  // namespace ms::cuda
