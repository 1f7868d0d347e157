//! The egui viewer. One panel, one module; the UI thread only draws what the pipeline
//! (ingest, rewind and NVML threads) has published.

pub mod allocator;
pub mod app;
pub mod blocks;
pub mod cells;
pub mod compare;
pub mod events;
pub mod figures;
pub mod help;
pub mod lod;
pub mod map;
pub mod options;
pub mod processes;
pub mod raster;
pub mod replay;
pub mod screenshot;
pub mod timeline;
