//! The progress line on a terminal: a map of the file that shows where the bytes are (each
//! cell one slice of the file, shaded by how much of it has landed), then the numbers,
//! fitted to the terminal's width. Pure: ranges, sizes and widths in, text out.

/// Shades of a cell by how much of its slice has landed: none, some, half, most, all.
const SHADES: [char; 5] = [' ', '░', '▒', '▓', '█'];

/// Fewest cells worth drawing: a narrower terminal gets the numbers alone.
pub const MIN_CELLS: usize = 10;

/// The map of `total` bytes in `cells` cells: cell `i` covers bytes
/// `[i·total/cells, (i+1)·total/cells)` and is shaded by the share of them that
/// `landed` (sorted, disjoint `[start, end)` ranges) covers — `█` all, ` ` none, `░▒▓`
/// between (thirds; a cell with any byte missing is never `█`, one with any byte
/// landed never blank). Empty for `total` 0 or `cells` 0.
pub fn map(landed: &[(u64, u64)], total: u64, cells: usize) -> String {
    if total == 0 || cells == 0 {
        return String::new();
    }
    let mut out = String::with_capacity(cells * 3);
    let mut r = 0; // first range that may reach the current cell
    for i in 0..cells as u64 {
        let a = (u128::from(total) * u128::from(i) / cells as u128) as u64;
        let b = (u128::from(total) * u128::from(i + 1) / cells as u128) as u64;
        while r < landed.len() && landed[r].1 <= a {
            r += 1;
        }
        let mut have = 0;
        for &(s, e) in landed[r..].iter().take_while(|&&(s, _)| s < b) {
            have += e.min(b) - s.max(a);
        }
        let len = b - a;
        let shade = if len == 0 || have >= len {
            4
        } else if have == 0 {
            0
        } else {
            // 1..=3 by thirds, never 0 or 4 for a partial cell.
            (1 + (3 * have / len) as usize).min(3)
        };
        out.push(SHADES[shade]);
    }
    out
}

/// The line for a terminal `width` columns wide: `[map] numbers` when the map gets at
/// least [`MIN_CELLS`] cells, else `numbers` alone; never wider than `width - 1` (the last
/// column left free, so that no terminal wraps the line), padded with spaces to that
/// width so that a redraw covers what the previous line wrote.
pub fn fit(numbers: &str, landed: &[(u64, u64)], total: Option<u64>, width: usize) -> String {
    let room = width.saturating_sub(1);
    let chars = numbers.chars().count();
    let cells = room.saturating_sub(chars + 3); // "[" + "] " around the map
    let mut line = match total {
        Some(t) if t > 0 && cells >= MIN_CELLS => format!("[{}] {numbers}", map(landed, t, cells)),
        _ => numbers.chars().take(room).collect(),
    };
    let n = line.chars().count();
    line.extend(std::iter::repeat_n(' ', room.saturating_sub(n)));
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_shaded_by_what_landed_in_them() {
        assert_eq!(map(&[], 100, 4), "    ");
        assert_eq!(map(&[(0, 100)], 100, 4), "████");
        assert_eq!(map(&[(0, 50)], 100, 4), "██  ");
        // One byte in a cell is never blank; one byte missing is never full.
        assert_eq!(map(&[(0, 1), (51, 100)], 100, 4), "░ ▓█");
        assert_eq!(map(&[(0, 24), (75, 100)], 100, 4), "▓  █");
        // Thirds: a third, half, two thirds and more of a cell.
        assert_eq!(map(&[(0, 12), (25, 30), (50, 68)], 100, 4), "▒░▓ ");
    }

    #[test]
    fn ranges_spanning_cells_and_uneven_sizes() {
        assert_eq!(map(&[(10, 30), (40, 90)], 100, 10), " ██ █████ ");
        // 7 bytes in 3 cells: 2, 2, 3 bytes; every byte is counted once.
        assert_eq!(map(&[(0, 7)], 7, 3), "███");
        assert_eq!(map(&[(2, 4)], 7, 3), " █ ");
        // More cells than bytes: empty slices count as landed.
        assert_eq!(map(&[(0, 2)], 2, 4).chars().count(), 4);
        // Huge files do not overflow.
        assert_eq!(map(&[(0, u64::MAX / 2)], u64::MAX, 2), "█ ");
        assert_eq!(map(&[(0, 10)], 0, 4), "");
    }

    #[test]
    fn the_line_fits_the_terminal_and_drops_the_map_when_narrow() {
        let nums = "48.4% 15.5 MiB / 32.0 MiB  8.0 MiB/s  ETA 2s  4 conn";
        let l = fit(nums, &[(0, 50)], Some(100), 80);
        assert_eq!(l.chars().count(), 79);
        assert!(l.starts_with("[█") && l.contains(&format!("] {nums}")), "{l}");
        // Too narrow for ten cells: the numbers alone, cut to the width.
        let l = fit(nums, &[(0, 50)], Some(100), 60);
        assert_eq!(l, format!("{nums:<59}"));
        assert_eq!(fit(nums, &[], Some(100), 20).chars().count(), 19);
        // Unknown size: no map.
        assert_eq!(fit("1.0 MiB", &[], None, 80).trim_end(), "1.0 MiB");
    }
}
