//! The client library: placeholder, being written.
