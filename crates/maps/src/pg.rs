//! Placement-group ids.

use std::fmt;

/// A placement group: pool id and placement seed (`1.6f` in Ceph's notation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PgId {
    /// Pool id.
    pub pool: u64,
    /// Placement seed, below the pool's `pg_num` for an actual PG.
    pub seed: u32,
}

impl fmt::Display for PgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:x}", self.pool, self.seed)
    }
}

impl std::str::FromStr for PgId {
    type Err = crate::MapError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || crate::MapError::Invalid(format!("bad pg id '{s}'"));
        let (p, h) = s.split_once('.').ok_or_else(bad)?;
        Ok(PgId {
            pool: p.parse().map_err(|_| bad())?,
            seed: u32::from_str_radix(h, 16).map_err(|_| bad())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse() {
        let pg = PgId {
            pool: 1,
            seed: 0x69,
        };
        assert_eq!(pg.to_string(), "1.69");
        assert_eq!("1.69".parse::<PgId>().ok(), Some(pg));
        assert!("x".parse::<PgId>().is_err());
    }
}
