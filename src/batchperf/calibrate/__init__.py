"""The calibration of ``ab``'s detector: the cells whose A/A and slowed verdicts measure how well ``ab`` decides
on this machine (:mod:`.cells`), and the scoring and replay of those verdicts that ``tools/ab_detector.py`` prints
(studies/ab-detector/README.md)."""
