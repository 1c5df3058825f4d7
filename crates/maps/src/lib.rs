//! The cluster map (work in progress).
