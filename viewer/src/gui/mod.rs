//! The egui viewer. One panel, one module; the UI thread only draws what the pipeline
//! (ingest, rewind and NVML threads) has published.

pub mod cells;
pub mod events;
pub mod figures;
pub mod map;
pub mod raster;
pub mod timeline;
