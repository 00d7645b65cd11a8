"""Generic report writers: Markdown and self-contained HTML from tables and PNG figures.

from tying.report import Column, Document, Figure, Table
doc = Document("My report")
section = doc.section("Results")
section.add(Table([Column("name", "run"), Column("loss", "loss", "nats/token")], rows))
section.add(Figure(Path("figures/curves.png"), "learning curves"))
doc.write(out_dir)        # out_dir/report.md (figures linked), out_dir/report.html (embedded)

Tables scroll sideways inside their own box when wider than the page; integers from 10,000
on get thousands separators (`format_value`). `tying.report.style` is the figures' common
look: a hollow marker shape per series, plain tick labels, and `coincident_groups` /
`coincidence_note` for lines that lie on one another.
"""

from tying.report.document import Column, Document, Figure, Section, Table, format_value

__all__ = ["Column", "Document", "Figure", "Section", "Table", "format_value"]
