untrusted comment: verify with openbsd-79-base.pub
RWRavJ3we3yenqcu6B+WKBzd8VVrKsD0BkjnDTuy2pe0+SAFxy3KASwNR1irMyOFRmS9jVk/SUnq+G9kokEUMJQynwIa+N/nKAs=
