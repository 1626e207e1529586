//! The stress harness of `mount_stress.rs`, in the shape of mountpoint-s3's:
//! what must hold ([`invariants`]), who loads the mount ([`workers`]), how one
//! run is put together and judged ([`scenario`]), and how the Harness's side of
//! the store is written ([`session_log`]).

pub mod invariants;
pub mod scenario;
pub mod session_log;
pub mod workers;
