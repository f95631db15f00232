-- TPC-H Q5 (local supplier volume). Changed: comma joins as JOIN ... ON; the date + INTERVAL written
-- as the date; no ORDER BY.
CREATE MATERIALIZED VIEW q5 AS
SELECT n_name, sum(l_extendedprice * (1 - l_discount)) AS revenue
FROM customer
  JOIN orders ON c_custkey = o_custkey
  JOIN lineitem ON l_orderkey = o_orderkey
  JOIN supplier ON l_suppkey = s_suppkey AND c_nationkey = s_nationkey
  JOIN nation ON s_nationkey = n_nationkey
  JOIN region ON n_regionkey = r_regionkey
WHERE r_name = 'ASIA' AND o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1995-01-01'
GROUP BY n_name;
