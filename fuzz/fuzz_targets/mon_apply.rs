//! Monitor command arguments, as the replicated state machine takes them:
//! a booted monitor state (3 OSDs on 3 hosts) is driven through a sequence
//! of OSD-map changes built from the input — pools made, set (every
//! property, values well formed or not), renamed, removed; snapshots;
//! OSDs created, marked, removed; pg_temp and upmaps for PG ids well
//! formed or not; CRUSH buckets; flags; erasure-code profiles; the
//! autoscaler's and the placement steps' own changes. A change may be
//! refused but never panic, and after every change the map still
//! validates, encodes and decodes to itself, and maps its PGs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shoal_mon::fuzzing::run(data));
