//! `shoal store`: make, check and inspect an OSD's BlockStore.

use std::path::PathBuf;

use anyhow::bail;
use clap::Subcommand;
use shoal_objectstore::block::MkfsOptions;
use shoal_objectstore::tool;

/// Object store commands.
#[derive(Debug, Subcommand)]
pub enum StoreCmd {
    /// Format a new BlockStore in PATH (refuses an existing store).
    Mkfs {
        /// The store's directory.
        path: PathBuf,
        /// Size of the data file, e.g. 1G, 512M (default 1G).
        #[arg(long, default_value = "1G")]
        size: String,
    },
    /// Check every metadata cross-reference (and with --deep every block
    /// checksum); exits non-zero when anything is wrong.
    Fsck {
        /// The store's directory.
        path: PathBuf,
        /// Also read every data block and verify its crc32c.
        #[arg(long)]
        deep: bool,
    },
    /// Capacity, usage and counts.
    Stat {
        /// The store's directory.
        path: PathBuf,
    },
}

/// Parses `1G`, `512M`, `4096K` or a plain byte count.
fn parse_size(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let (num, shift) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 10),
        Some((i, 'M' | 'm')) => (&s[..i], 20),
        Some((i, 'G' | 'g')) => (&s[..i], 30),
        Some((i, 'T' | 't')) => (&s[..i], 40),
        _ => (s, 0),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("bad size {s:?}: a number with K, M, G or T"))?;
    n.checked_shl(shift)
        .filter(|v| v >> shift == n)
        .ok_or_else(|| anyhow::anyhow!("size {s:?} is too large"))
}

/// Runs one `shoal store` subcommand.
pub fn run(cmd: StoreCmd) -> anyhow::Result<()> {
    match cmd {
        StoreCmd::Mkfs { path, size } => {
            let opts = MkfsOptions {
                data_bytes: parse_size(&size)?,
            };
            println!("{}", tool::mkfs(&path, &opts)?);
        }
        StoreCmd::Fsck { path, deep } => {
            let report = tool::fsck(&path, deep)?;
            println!("{report}");
            if !report.is_clean() {
                bail!(
                    "{} problems found in {}",
                    report.errors.len(),
                    path.display()
                );
            }
        }
        StoreCmd::Stat { path } => println!("{}", tool::stat(&path)?),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("512m").unwrap(), 512 << 20);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999T").is_err());
    }
}
