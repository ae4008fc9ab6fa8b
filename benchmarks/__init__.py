"""The benchmarks (scripts run as ``python benchmarks/<name>.py``; see benchmarks/README.md). A
package only so that pytest imports its tests as ``benchmarks.tests``, apart from the product's
``tests`` package; the scripts import each other as top-level modules (``import decision``)."""
