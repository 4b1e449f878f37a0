"""Gates: their criteria, the honest records, measuring on hardware, and the reports."""
