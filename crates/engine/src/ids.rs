//! Task ids: the handle a client keeps, and what a store may read back from it.
//!
//! Every id is 44 lowercase hex digits: a 12-digit prefix, then 128 bits from the OS
//! CSPRNG in 32 digits. The random part alone makes an id unguessable (more than the 122
//! bits a UUIDv4 carries); clients treat the whole id as opaque. The prefix has one of
//! two shapes, told apart by its first digit:
//!
//! - **time-ordered** (`0…`): the creation time in Unix milliseconds, 12 digits (a
//!   leading `0` until the year 2527). What every store issued before row keys, and what
//!   the PostgreSQL store issues.
//! - **row-keyed** (`1…`): `1`, then the task's SQLite `rowid` in 11 digits (44 bits).
//!   The SQLite store finds the row with one b-tree walk by `rowid`, then compares the
//!   whole id with the row's, so an id with the right row key and a wrong random part
//!   finds nothing, like any unknown id. Without it, a lookup walked the `id` index and
//!   then the table: two b-trees, four `pread`s a lookup at 10M tasks
//!   (`docs/benchmarks/store-scale.md`).
//!
//! Either way ids sort by creation (rowids are handed out in order, and every row-keyed
//! id sorts after every time-ordered one), so a new task's insert lands on the right
//! edge of each b-tree keyed by id, and `tasks/list` pages in creation order.
//!
//! What a prefix tells a client: a time-ordered one, its task's `createdAt`; a row-keyed
//! one, how many tasks the store had made before (rowids are handed out in sequence), so
//! two of a client's own ids tell it how many tasks were made between them, by anyone.
//! That is the price of finding a row by its id alone (rows in a random order would
//! dirty a random leaf page on every insert, which the time prefix was there to stop).
//! Never anything about another task's id: the random part is what finds a task.

/// The largest rowid a row-keyed id can carry: beyond it, ids are time-ordered again.
const MAX_ROW_KEY: i64 = (1 << 44) - 1;

/// A time-ordered id for a task created at `now_ms`.
pub fn time_ordered(now_ms: i64) -> Result<String, getrandom::Error> {
    Ok(format!("{}{:032x}", time_floor(now_ms), random_part()?))
}

/// The smallest time-ordered id of a task created at or after `ms`: among time-ordered
/// ids, a time bound is a primary-key range.
pub fn time_floor(ms: i64) -> String {
    format!("{:012x}", (ms.max(0) as u64) & 0xffff_ffff_ffff)
}

/// A row-keyed id for the task that will be stored in row `rowid`, or `None` when the
/// rowid does not fit (the caller then issues a time-ordered id).
pub fn row_keyed(rowid: i64) -> Result<Option<String>, getrandom::Error> {
    if !(1..=MAX_ROW_KEY).contains(&rowid) {
        return Ok(None);
    }
    Ok(Some(format!("1{rowid:011x}{:032x}", random_part()?)))
}

/// The rowid a row-keyed id names; `None` for any other string (a time-ordered id, or
/// anything a client made up), which the store then looks up by the whole id.
pub fn row_key(id: &str) -> Option<i64> {
    let digits = id.as_bytes();
    if digits.len() != 44 || digits[0] != b'1' || !digits.iter().all(is_lower_hex) {
        return None;
    }
    // 11 hex digits: at most 2^44 - 1, which always fits.
    i64::from_str_radix(&id[1..12], 16).ok()
}

fn is_lower_hex(byte: &u8) -> bool {
    matches!(byte, b'0'..=b'9' | b'a'..=b'f')
}

fn random_part() -> Result<u128, getrandom::Error> {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random)?;
    Ok(u128::from_be_bytes(random))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_ordered_ids_are_random_and_sort_by_creation_time() {
        let earlier = time_ordered(1_764_000_000_000).unwrap();
        let later = time_ordered(1_764_000_000_001).unwrap();
        let twin = time_ordered(1_764_000_000_001).unwrap();
        assert_eq!(earlier.len(), 44);
        assert!(earlier.bytes().all(|b| is_lower_hex(&b)));
        assert!(earlier.starts_with('0'));
        assert!(earlier < later && earlier < twin);
        assert_ne!(later, twin, "same millisecond, different random part");
        assert_eq!(later[..12], twin[..12]);
        assert_eq!(row_key(&later), None, "a time-ordered id names no row");
    }

    #[test]
    fn row_keyed_ids_carry_their_rowid_and_sort_after_time_ordered_ones() {
        let first = row_keyed(1).unwrap().unwrap();
        let next = row_keyed(2).unwrap().unwrap();
        let last = row_keyed(MAX_ROW_KEY).unwrap().unwrap();
        let twin = row_keyed(2).unwrap().unwrap();
        assert_eq!(first.len(), 44);
        assert!(first.bytes().all(|b| is_lower_hex(&b)));
        assert_eq!(row_key(&first), Some(1));
        assert_eq!(row_key(&last), Some(MAX_ROW_KEY));
        assert_ne!(next, twin, "same row, different random part");
        assert!(first < next && next < last);
        // Every time-ordered id up to the year 2527 sorts before every row-keyed id.
        assert!(time_ordered(0xfff_ffff_ffff).unwrap() < first);
        assert_eq!(row_keyed(0).unwrap(), None);
        assert_eq!(row_keyed(MAX_ROW_KEY + 1).unwrap(), None);
    }

    #[test]
    fn only_a_well_formed_row_keyed_id_names_a_row() {
        let id = row_keyed(0xabc).unwrap().unwrap();
        assert_eq!(row_key(&id), Some(0xabc));
        for other in [
            id.to_uppercase(),
            id[..43].to_owned(),
            format!("{id}0"),
            format!("{}g{}", &id[..5], &id[6..]),
            format!("2{}", &id[1..]),
            "0b6c1a9e-3f0d-4d5e-9a51-7c1f2e3d4b5a".into(),
            "1ééééééééééééééééééééé".into(),
            String::new(),
        ] {
            assert_eq!(row_key(&other), None, "{other:?}");
        }
    }
}
