"""The chapters' instruments: the semaphore timeline, the ICI mesh, the IR x-ray, the roofline plot and the capstone's manifest. Graded tests and learners may import these."""
