"""The ODP solver's scalability study (the paper's section 7.3): random instances after its Table 2, solved
over a grid of sizes and settings, with the figures and the verdict on its claims. A command over the
solver in `placement/odp/`, which no placement strategy needs."""
