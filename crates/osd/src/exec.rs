//! Op execution: placeholder, being written.
