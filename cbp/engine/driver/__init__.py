"""What runs in the driver: a stage epoch's plan and path, built once (:mod:`.taskplan`), the
SparkSession (:mod:`.session`) and its JVM (:mod:`.jvmcache`, :mod:`.jvmlog`), one stage epoch as
one Spark job (:mod:`.job`), Delta reads (:mod:`.deltaread`, :mod:`.remote_read`), small epochs
routed by the driver (:mod:`.smallepoch`), keeping a partition on its executor (:mod:`.locality`),
progress (:mod:`.progress`) and the job of a state rewrite (:mod:`.restate`). It may import
:mod:`cbp.engine.task`: every function its jobs ship to the executors is defined there."""
