"""Test support: failpoint arming, fault injection into the reference receiver and job-stream builders."""
