use counts::count;

#[test]
fn one_is_singular() {
    assert_eq!(count(1, "file"), "1 file");
}

#[test]
fn every_other_number_is_plural() {
    assert_eq!(count(0, "file"), "0 files");
    assert_eq!(count(3, "byte"), "3 bytes");
}
