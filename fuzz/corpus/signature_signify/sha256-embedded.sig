untrusted comment: verify with openbsd-79-base.pub
RWRavJ3we3yenqcu6B+WKBzd8VVrKsD0BkjnDTuy2pe0+SAFxy3KASwNR1irMyOFRmS9jVk/SUnq+G9kokEUMJQynwIa+N/nKAs=
SHA256 (image.bin) = 17e942e045d8690b1579cf161e1c4e526978b08f12d304e9a7fa584d89833367
