# DSS's DMR calls for scripts/dmr_benchmark.py: DMLtest with smoothing, then callDMR with its
# documented defaults (delta = 0, p.threshold = 1e-5, minlen = 50, minCG = 3, dis.merge = 100,
# pct.sig = 0.5) and, as a second row, with delta = 0.1 (the benchmark's minimum difference).
#
#   Rscript scripts/dss_dmr.R SHEET.tsv OUTDIR
#
# SHEET.tsv: columns sample, group, file (DSS's text format, header chr pos N X); the first
# group in the sheet is DSS's group1. Writes OUTDIR/dml.tsv.gz (every CpG tested),
# OUTDIR/dmr.tsv and OUTDIR/dmr_delta0.1.tsv (the calls; a header only when there are none) and
# OUTDIR/seconds.tsv (read, DMLtest, callDMR).
args <- commandArgs(trailingOnly = TRUE)
sheet <- read.table(args[1], header = TRUE, sep = "\t", stringsAsFactors = FALSE)
out <- args[2]
suppressMessages({library(DSS); library(data.table)})
t0 <- Sys.time()
dats <- lapply(sheet$file, function(f) {
  d <- as.data.frame(fread(f, colClasses = c("character", "integer", "integer", "integer")))
  colnames(d) <- c("chr", "pos", "N", "X")
  d
})
BSobj <- makeBSseqData(dats, sheet$sample)
rm(dats)
t1 <- Sys.time()
groups <- unique(sheet$group)
dml <- DMLtest(BSobj, group1 = sheet$sample[sheet$group == groups[1]],
               group2 = sheet$sample[sheet$group == groups[2]], smoothing = TRUE)
t2 <- Sys.time()
dmr <- callDMR(dml)
dmr01 <- callDMR(dml, delta = 0.1)
t3 <- Sys.time()
columns <- c("chr", "start", "end", "length", "nCG", "meanMethy1", "meanMethy2", "diff.Methy", "areaStat")
save <- function(calls, name) {
  if (is.null(calls) || nrow(calls) == 0) calls <- as.data.frame(setNames(replicate(length(columns), character(0),
                                                                           simplify = FALSE), columns))
  fwrite(calls[, columns], file.path(out, name), sep = "\t")
}
save(dmr, "dmr.tsv")
save(dmr01, "dmr_delta0.1.tsv")
fwrite(dml[, intersect(c("chr", "pos", "mu1", "mu2", "diff", "stat", "pval", "fdr"), colnames(dml))],
       file.path(out, "dml.tsv.gz"), sep = "\t")
fwrite(data.frame(step = c("read", "DMLtest", "callDMR"),
                  seconds = as.numeric(c(difftime(t1, t0, units = "secs"), difftime(t2, t1, units = "secs"),
                                         difftime(t3, t2, units = "secs")))),
       file.path(out, "seconds.tsv"), sep = "\t")
