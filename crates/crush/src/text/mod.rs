//! Ceph's CRUSH text format: what `crushtool -d` prints and `crushtool -c`
//! reads. Parsing follows `CrushCompiler` (legacy tunables unless stated,
//! automatic bucket ids, shadow trees built when the first rule is seen), so
//! that a map compiled here maps like the one crushtool compiles.

mod compile;
mod parse;
mod print;
mod weight;

pub use parse::parse;
pub use print::print;
pub use weight::{format_weight, parse_weight};
