//! zsync control files (`zsyncmake`): the header, block sums, the rolling search.
