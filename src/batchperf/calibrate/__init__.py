"""The calibration of ``ab``'s detector (studies/ab-detector/README.md): the cells whose A/A and slowed verdicts
measure how well ``ab`` decides on this machine (:mod:`.cells`), those verdicts run and resumed (:mod:`.study`),
read back and tabled (:mod:`.scores`), replayed for the estimate (:mod:`.replay`) and their noise (:mod:`.noise`);
``tools/ab_detector.py`` parses its options and prints them."""
