untrusted comment: verify with release.pub
RWQSjnnOPzh3X1pHCK2qzC4ptHK6UAUucS6Fy/yEz44DDEs+fXtaeF8CYFdCq/piRYXHqbXl0d/HRhdzB8a6dhwo6DeNfscCDAA=
