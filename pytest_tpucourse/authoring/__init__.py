"""What a course author runs: a new chapter, its exercises and its gate, written in every place
the course reads them (`tpucourse new-chapter`, docs/authoring.md "Adding a chapter")."""
