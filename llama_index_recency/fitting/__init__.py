"""Fitting: the gate's and the policy's fits, and calibration from labelled questions, without I/O."""
