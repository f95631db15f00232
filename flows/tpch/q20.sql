-- TPC-H Q20 (potential part promotion). Changed: comma join as JOIN ... ON; the date + INTERVAL
-- written out; no ORDER BY.
CREATE MATERIALIZED VIEW q20 AS
SELECT s_name, s_address
FROM supplier
  JOIN nation ON s_nationkey = n_nationkey
WHERE s_suppkey IN (
    SELECT ps_suppkey FROM partsupp
    WHERE ps_partkey IN (SELECT p_partkey FROM part WHERE p_name LIKE 'forest%')
      AND ps_availqty > (
        SELECT 0.5 * sum(l_quantity) FROM lineitem
        WHERE l_partkey = ps_partkey AND l_suppkey = ps_suppkey
          AND l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01'))
  AND n_name = 'CANADA';
